//! Fuzz target: the wire reader on both ends — the agent's reader of page messages and
//! the page's reader of agent frames — must return a message or an error for any text,
//! never panic; a message the agent accepts must survive being written and read again.
#![no_main]

use gpumem_proto::wire::{AgentFrame, ClientMessage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(message) = ClientMessage::parse(text) {
        let again = message.to_json();
        assert!(
            ClientMessage::parse(&again).is_ok(),
            "a written message reads back"
        );
    }
    let _ = AgentFrame::parse(text);
    if let Ok(value) = serde_json::from_str(text) {
        let _ = AgentFrame::from_value_shown(value);
    }
});

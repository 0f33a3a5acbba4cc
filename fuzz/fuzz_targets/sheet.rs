//! Fuzz target: the sheet reader (`gpumem.sheet/v1`) the page runs on an imported file
//! must return a sheet or an error for any bytes — never panic — and a sheet it accepts
//! must survive being written and read again.
#![no_main]

use gpumem_proto::sheet::{Sheet, SheetImport};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = SheetImport::from_json(text);
    if let Ok(sheet) = Sheet::from_json(text) {
        let again = sheet.to_json_pretty();
        assert!(
            Sheet::from_json(&again).is_ok(),
            "a written sheet reads back"
        );
    }
});

//! The Hub's model search, for the ids offered while a user types.

#![deny(clippy::arithmetic_side_effects)]

use serde::Deserialize;

use super::ids::{check_repo_id, percent_encode};
use super::{HubError, bounded};

/// Model ids offered while a user types: at most this many.
pub const SEARCH_LIMIT: usize = 8;

/// `{endpoint}/api/models?search=…`: the Hub's model search (`huggingface_hub`'s
/// `HfApi.list_models(search=…, sort="downloads")`, `src/huggingface_hub/hf_api.py`),
/// most downloaded first. `None` for a query too short to be worth a request (under 2
/// characters), too long (over 96) or holding control characters.
pub fn search_url(endpoint: &str, query: &str) -> Option<String> {
    let q = query.trim();
    let n = q.chars().count();
    if !(2..=96).contains(&n) || q.chars().any(char::is_control) {
        return None;
    }
    Some(format!(
        "{endpoint}/api/models?search={}&sort=downloads&direction=-1&limit={SEARCH_LIMIT}",
        percent_encode(q)
    ))
}

/// The model ids of a search answer (a JSON array of objects with `id`, or the older
/// `modelId`), at most [`SEARCH_LIMIT`], each a valid repository id.
pub fn parse_search(json: &[u8]) -> Result<Vec<String>, HubError> {
    const WHAT: &str = "model search";
    #[derive(Deserialize)]
    struct Found {
        id: Option<String>,
        #[serde(rename = "modelId")]
        model_id: Option<String>,
    }
    bounded(json, WHAT)?;
    let found: Vec<Found> = serde_json::from_slice(json).map_err(|e| HubError::BadJson {
        what: WHAT,
        reason: e.to_string(),
    })?;
    Ok(found
        .into_iter()
        .filter_map(|f| f.id.or(f.model_id))
        .filter(|id| check_repo_id(id).is_ok())
        .take(SEARCH_LIMIT)
        .collect())
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects)] // test data from small known numbers
mod tests {
    use super::*;
    use crate::import::hub::*;

    #[test]
    fn searches_are_bounded_and_read() {
        assert_eq!(search_url("https://h", "l"), None);
        assert_eq!(search_url("https://h", &"x".repeat(97)), None);
        assert_eq!(search_url("https://h", "a\nb"), None);
        assert_eq!(
            search_url("https://h", " llama 3.1 ").as_deref(),
            Some("https://h/api/models?search=llama%203.1&sort=downloads&direction=-1&limit=8")
        );
        let json = br#"[{"id":"meta-llama/Llama-3.1-8B","downloads":9},{"modelId":"gpt2"},{"id":"bad id/x/y"},{"other":1}]"#;
        assert_eq!(
            parse_search(json).unwrap(),
            vec!["meta-llama/Llama-3.1-8B".to_string(), "gpt2".to_string()]
        );
        assert!(parse_search(b"{").is_err());
        assert!(parse_search(&vec![b' '; MAX_LISTING_BYTES + 1]).is_err());
    }
}

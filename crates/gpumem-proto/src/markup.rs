//! Text placed in markup that the page builds as a string (the engine module's drawn
//! results, the history view): one escaping, so the two pages cannot escape differently.

/// `text` safe inside an element or a quoted attribute (`&`, `<`, `>`, `"` and `'`
/// replaced by their entities), cut at `limit` characters with an ellipsis.
pub fn esc(text: &str, limit: usize) -> String {
    let mut out = String::with_capacity(text.len().min(limit));
    for (i, c) in text.chars().enumerate() {
        if i == limit {
            out.push('…');
            break;
        }
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn markup_characters_become_entities_and_long_text_is_cut() {
        assert_eq!(
            esc(r#"<img src=x onerror="a('b')">&"#, usize::MAX),
            "&lt;img src=x onerror=&quot;a(&#39;b&#39;)&quot;&gt;&amp;"
        );
        assert_eq!(esc("héllo wörld", 5), "héllo…");
        assert_eq!(esc("short", 5), "short");
    }
}

//! docs/capture.md lists every interposed symbol and every setting: the
//! code's tables and the user's documentation cannot drift apart.

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/capture.md"
    ))
    .unwrap()
}

#[test]
fn every_symbol_is_documented() {
    let doc = doc();
    let words: std::collections::HashSet<&str> = doc
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    for sym in paralog_capture::SYMBOLS {
        assert!(words.contains(sym), "docs/capture.md does not list {sym}");
    }
}

#[test]
fn every_setting_is_documented() {
    let doc = doc();
    for s in paralog_capture::settings::SETTINGS {
        assert!(
            doc.contains(&format!("`{}`", s.name)),
            "docs/capture.md does not describe {}",
            s.name
        );
    }
}

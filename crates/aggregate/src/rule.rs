//! `--aggregate RULE` / `PARALOG_AGGREGATE`: which captured files are
//! members of checkpoint sets, and of which set.
//!
//! A rule is a glob relative to the prefix (globset syntax: `*` and `?`
//! stay inside one path component, `**` crosses them, `[...]` and
//! `{a,b}` as usual) with exactly one component that is exactly `{set}`:
//! that component names the set directory, e.g. `ckpt/{set}/rank-*.dat`.
//! A path matches when the whole of it matches the glob with `{set}`
//! standing for any one component; the set directory is the path up to
//! and including that component, the member the rest.
//!
//! Several rules: repeat `--aggregate`, or separate rules by commas
//! outside `{...}` and `[...]` (in `PARALOG_AGGREGATE` too). A comma that
//! belongs to a path is written `[,]`. The first rule that matches a path
//! decides its set.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const SET: &str = "{set}";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("aggregate rule is empty")]
    Empty,
    #[error("aggregate rule {0:?} is absolute: rules are relative to the prefix")]
    Absolute(String),
    #[error("aggregate rule {0:?} has no `{{set}}` component naming the checkpoint set directory (e.g. ckpt/{{set}}/rank-*.dat)")]
    NoSet(String),
    #[error("aggregate rule {0:?} has `{{set}}` more than once: one component names the set")]
    TwoSets(String),
    #[error("aggregate rule {0:?}: `{{set}}` must be a whole path component, not part of {1:?}")]
    SetNotWhole(String, String),
    #[error("aggregate rule {0:?} has an empty, `.` or `..` component")]
    BadComponent(String),
    #[error("aggregate rule {0:?} has nothing after `{{set}}`: the members are files inside the set directory")]
    NoMember(String),
    #[error(
        "aggregate rule {0:?}: `**` before `{{set}}` would leave the set directory's depth open"
    )]
    DoubleStarBeforeSet(String),
    #[error("aggregate rule {0:?}: a `/` inside `{{...}}` or `[...]` is not supported")]
    SlashInGroup(String),
    #[error("aggregate rule {0:?} is not a valid glob: {1}")]
    Glob(String, String),
}

/// One rule, compiled.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    /// Index of the `{set}` component.
    set_at: usize,
    matcher: globset::GlobMatcher,
}

/// A match: the set directory and the member, relative paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Match {
    /// Which rule (its index in `Rules`).
    pub rule: usize,
    pub set: Vec<u8>,
    pub member: Vec<u8>,
}

impl Rule {
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let t = || text.to_owned();
        if text.is_empty() {
            return Err(RuleError::Empty);
        }
        if text.starts_with('/') {
            return Err(RuleError::Absolute(t()));
        }
        let mut depth = 0i32;
        for ch in text.chars() {
            match ch {
                '{' | '[' => depth += 1,
                '}' | ']' => depth -= 1,
                '/' if depth > 0 => return Err(RuleError::SlashInGroup(t())),
                _ => {}
            }
        }
        let comps: Vec<&str> = text.split('/').collect();
        if comps
            .iter()
            .any(|c| c.is_empty() || *c == "." || *c == "..")
        {
            return Err(RuleError::BadComponent(t()));
        }
        let sets: Vec<usize> = (0..comps.len()).filter(|&i| comps[i] == SET).collect();
        if let Some(c) = comps.iter().find(|c| c.contains(SET) && **c != SET) {
            return Err(RuleError::SetNotWhole(t(), (*c).to_owned()));
        }
        let set_at = match sets.as_slice() {
            [] => return Err(RuleError::NoSet(t())),
            [i] => *i,
            _ => return Err(RuleError::TwoSets(t())),
        };
        if set_at + 1 == comps.len() {
            return Err(RuleError::NoMember(t()));
        }
        if comps[..set_at].iter().any(|c| c.contains("**")) {
            return Err(RuleError::DoubleStarBeforeSet(t()));
        }
        let mut glob_text = comps.clone();
        glob_text[set_at] = "*";
        let glob = globset::GlobBuilder::new(&glob_text.join("/"))
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| RuleError::Glob(t(), e.kind().to_string()))?;
        Ok(Rule {
            text: text.to_owned(),
            set_at,
            matcher: glob.compile_matcher(),
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The set directory and member of `rel` (a path relative to the
    /// prefix), if the rule matches it.
    pub fn matches(&self, rel: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        if !self.matcher.is_match(Path::new(OsStr::from_bytes(rel))) {
            return None;
        }
        // The component count before `{set}` is fixed (no `**` there).
        let mut slashes = rel
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'/')
            .map(|(i, _)| i);
        let end = slashes.nth(self.set_at)?;
        let (set, member) = (&rel[..end], &rel[end + 1..]);
        if member.is_empty() || crate::format::check_member_path(member).is_err() {
            return None;
        }
        Some((set.to_vec(), member.to_vec()))
    }
}

/// The rules of a run, in order.
#[derive(Debug, Clone, Default)]
pub struct Rules(Vec<Rule>);

impl Rules {
    /// From the values of `--aggregate` (or `PARALOG_AGGREGATE`), each one
    /// rule or several separated by commas outside `{...}` and `[...]`.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Rules, RuleError> {
        let mut rules = Vec::new();
        for v in values {
            for text in split_top_level(v.as_ref()) {
                rules.push(Rule::parse(text.trim())?);
            }
        }
        Ok(Rules(rules))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn rules(&self) -> &[Rule] {
        &self.0
    }

    /// The first rule that matches `rel`, with its set and member.
    pub fn matches(&self, rel: &[u8]) -> Option<Match> {
        self.0.iter().enumerate().find_map(|(i, r)| {
            r.matches(rel).map(|(set, member)| Match {
                rule: i,
                set,
                member,
            })
        })
    }

    /// The rules as one `PARALOG_AGGREGATE` value.
    pub fn to_setting(&self) -> String {
        self.0
            .iter()
            .map(|r| r.text.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, ch) in s.char_indices() {
        match ch {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rule: &str, rel: &str) -> Option<(String, String)> {
        Rule::parse(rule)
            .unwrap()
            .matches(rel.as_bytes())
            .map(|(s, m)| (String::from_utf8(s).unwrap(), String::from_utf8(m).unwrap()))
    }

    #[test]
    fn matches_name_the_set_and_member() {
        let r = "ckpt/{set}/rank-*.dat";
        assert_eq!(
            m(r, "ckpt/step-000100/rank-00005.dat"),
            Some(("ckpt/step-000100".into(), "rank-00005.dat".into()))
        );
        assert_eq!(m(r, "ckpt/step-000100/sub/rank-00005.dat"), None);
        assert_eq!(m(r, "ckpt/rank-00005.dat"), None);
        assert_eq!(m(r, "other/s/rank-1.dat"), None);
        assert_eq!(m(r, "ckpt/s/rank-1.dat.tmp"), None);
        assert_eq!(
            m("{set}/**", "s1/a/b/c"),
            Some(("s1".into(), "a/b/c".into()))
        );
        assert_eq!(
            m("out/*/{set}/r*.{dat,idx}", "out/x/s/r1.idx"),
            Some(("out/x/s".into(), "r1.idx".into()))
        );
        // The member may not be one of the set's own files.
        assert_eq!(m("c/{set}/*", "c/s/set.plr"), None);
    }

    #[test]
    fn bad_rules_are_named() {
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("/abs/{set}/x", "absolute"),
            ("ckpt/rank-*.dat", "no `{set}`"),
            ("{set}/{set}/x", "more than once"),
            ("ckpt/step-{set}/x", "whole path component"),
            ("ckpt/../{set}/x", "`..`"),
            ("ckpt//{set}/x", "empty"),
            ("ckpt/{set}", "nothing after"),
            ("**/{set}/x", "`**` before"),
            ("{a/b,c}/{set}/x", "inside"),
            ("ckpt/{set}/[x", "not a valid glob"),
        ];
        for (rule, want) in cases {
            let e = Rule::parse(rule).unwrap_err().to_string();
            assert!(e.contains(want), "{rule}: {e}");
            if !rule.is_empty() {
                assert!(e.contains(rule), "the error names the rule: {e}");
            }
        }
    }

    #[test]
    fn several_rules_by_comma_or_repeat() {
        let r = Rules::parse(&["a/{set}/*.{x,y}, b/{set}/*", "c/{set}/r[,]*"]).unwrap();
        assert_eq!(r.rules().len(), 3);
        assert_eq!(r.matches(b"b/s/f").unwrap().rule, 1);
        assert_eq!(r.matches(b"a/s/f.y").unwrap().rule, 0);
        assert_eq!(r.matches(b"c/s/r,1").unwrap().set, b"c/s");
        assert!(r.matches(b"d/s/f").is_none());
        assert_eq!(Rules::parse(&[r.to_setting()]).unwrap().rules().len(), 3);
    }
}

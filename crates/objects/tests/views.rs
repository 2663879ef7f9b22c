//! When views are made (docs/objects.md "Views"): in the commit's call by
//! default, by the store's thread with `background_views`, waited for by
//! `wait_views` and by dropping the store; retention removes the views and
//! marks of the versions it drops.

mod common;

use common::{objstore, plain};
use paralog_objects::{zarr, ArrayMeta, DType, ViewState};

fn meta() -> ArrayMeta {
    ArrayMeta::new(DType::U16, &[8, 6], &[4, 4])
}

#[test]
fn views_made_in_the_commit_by_default() {
    let (_t, s) = plain();
    let c = s.put("a", &meta(), &[7u8; 96]).unwrap();
    assert_eq!(s.view_state("a", c.number), ViewState::Made);
    zarr::check_view(&s, &s.array("a", None).unwrap()).unwrap();
}

#[test]
fn background_views_are_made_after_the_commit_and_waited_for() {
    let (t, s) = plain();
    let s = s.background_views().unwrap();
    let mut numbers = Vec::new();
    for k in 0..5u8 {
        numbers.push(s.put("b", &meta(), &[k; 96]).unwrap().number);
    }
    s.wait_views();
    for &n in &numbers {
        assert_eq!(s.view_state("b", n), ViewState::Made, "version {n}");
        zarr::check_view(&s, &s.array("b", Some(n)).unwrap()).unwrap();
    }
    // Dropping the last handle waits for what is queued.
    let n = s.put("b", &meta(), &[9; 96]).unwrap().number;
    drop(s);
    let again = common::plain_at(t.path());
    assert_eq!(again.view_state("b", n), ViewState::Made);
    assert!(!again.views_mark("b", n).exists(), "the mark of made views");
}

#[test]
fn retention_drops_views_and_marks() {
    let (_t, s) = objstore(2, 2);
    for k in 0..4u8 {
        s.put("r", &meta(), &[k; 96]).unwrap();
    }
    assert_eq!(common::kept_numbers(&s, "r"), vec![3, 4]);
    for n in 1..=2 {
        assert!(!s.view_dir("r", n).exists(), "view of dropped version {n}");
        assert!(
            !s.view_file("r", n).exists(),
            "HDF5 view of dropped version {n}"
        );
    }
    // A mark left for a version retention later drops goes with it.
    let mark = s.views_mark("r", 4);
    std::fs::create_dir_all(mark.parent().unwrap()).unwrap();
    std::fs::write(&mark, "r version 4: views missing: test").unwrap();
    assert!(matches!(s.view_state("r", 4), ViewState::Missing(w) if w.contains("test")));
    s.put("r", &meta(), &[5; 96]).unwrap();
    s.put("r", &meta(), &[6; 96]).unwrap();
    assert!(!mark.exists(), "the mark of a dropped version");
}

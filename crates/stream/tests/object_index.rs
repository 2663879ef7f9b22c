//! The object index over random histories (proptest; more cases with
//! `PROPTEST_CASES=100000`): rounds adding objects to random partitions,
//! compactions of the small runs, expiries after the grace period. After
//! every step the index must encode and decode to itself, each partition's
//! objects must cover every offset from the first kept one to the high
//! watermark exactly once, and nothing retired may expire early.

use std::path::Path;

use paralog_stream::objects::{Object, ObjectIndex};
use proptest::prelude::*;

const PARTS: usize = 3;
const GRACE: u64 = 2;

fn check(ix: &ObjectIndex, added: &[u64]) -> Result<(), TestCaseError> {
    let p = Path::new("/remote/s/index");
    prop_assert_eq!(&ObjectIndex::decode(&ix.encode(), p).unwrap(), ix);
    for (i, part) in ix.parts.iter().enumerate() {
        prop_assert_eq!(part.next, added[i]);
        for off in 0..part.next {
            let o = ix.locate("s", i as u32, off).unwrap().unwrap();
            prop_assert!(o.first <= off && off < o.end);
        }
        prop_assert_eq!(ix.locate("s", i as u32, part.next).unwrap(), None);
    }
    Ok(())
}

proptest! {
    #[test]
    fn random_histories(rounds in proptest::collection::vec(
        (proptest::collection::vec((0u64..4, 1u64..200), PARTS), any::<bool>()), 1..40)) {
        let mut ix = ObjectIndex::empty(PARTS as u32);
        let mut added = vec![0u64; PARTS];
        for (round, (parts, compact)) in rounds.iter().enumerate() {
            let round = round as u64 + 1;
            let new: Vec<Option<Object>> = parts
                .iter()
                .zip(&added)
                .map(|(&(count, bytes), &next)| {
                    (count > 0).then_some(Object { first: next, end: next + count, bytes })
                })
                .collect();
            ix.add_round(round, &new, Path::new("i")).unwrap();
            for (a, (count, _)) in added.iter_mut().zip(parts) {
                *a += count;
            }
            check(&ix, &added)?;
            if *compact {
                for (p, run) in ix.compaction_runs(150, 2, 400) {
                    prop_assert!(run.len() >= 2 && run.iter().all(|o| o.bytes < 150));
                    let bytes: u64 = run.iter().map(|o| o.bytes).sum();
                    prop_assert!(bytes <= 400);
                    let into = Object { first: run[0].first, end: run[run.len() - 1].end, bytes };
                    ix.compact(p, into, round, Path::new("i")).unwrap();
                }
            }
            let before = ix.retired.len();
            let gone = ix.expire(round, GRACE);
            prop_assert_eq!(before, gone.len() + ix.retired.len());
            for r in &ix.retired {
                prop_assert!(r.round + GRACE > round, "{:?} outlived its grace", r);
            }
            for (p, o) in &gone {
                let named = &ix.parts[*p as usize].objects;
                prop_assert!(!named.contains(o), "{:?} of partition {} expired while named", o, p);
            }
            check(&ix, &added)?;
        }
    }
}

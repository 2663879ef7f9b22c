//! The object layout of a stream is the POSIX drain's with a segment
//! rolled every round (docs/streams.md "Object remotes"): drained with
//! `roll_bytes` 0, each remote segment file holds exactly one round's
//! batch of one partition, so it is byte for byte the object
//! `p<partition>/<first>-<end>` of that round, and the index built from
//! those files gives back the POSIX watermark the drain published.

use std::fs::File;
use std::path::Path;

use paralog_stream::format::{Header, Watermark, KIND_PART_SEGMENT, KIND_REMOTE_BATCH};
use paralog_stream::layout;
use paralog_stream::objects::{object_key, parse_object_key, Object, ObjectIndex, PartIndex};
use paralog_stream::segment::read_committed;
use paralog_stream::{drain_stream, DrainOptions, Partitioner, Producer};

const S: &str = "tele";
const N: u32 = 3;

#[test]
fn segments_rolled_every_round_are_the_objects() {
    let t = tempfile::tempdir().unwrap();
    let (local, remote) = (t.path().join("local"), t.path().join("remote"));
    std::fs::create_dir(&remote).unwrap();
    let opts = DrainOptions {
        roll_bytes: 0,
        ..Default::default()
    };
    let mut producers: Vec<Producer> = (0..2)
        .map(|_| Producer::open(&local, S, N, Partitioner::RoundRobin).unwrap())
        .collect();
    let mut rounds = 0;
    for round in 0..5u64 {
        for (i, p) in producers.iter_mut().enumerate() {
            // Uneven: some partitions get nothing in some rounds.
            for e in 0..(round as usize * 2 + i) {
                p.append(None, format!("r{round} p{i} e{e}").as_bytes(), None)
                    .unwrap();
            }
            p.flush().unwrap();
        }
        if drain_stream(&local, &remote, S, &opts)
            .unwrap()
            .round
            .is_some()
        {
            rounds += 1;
        }
    }
    let rdir = layout::stream_dir(&remote, S);
    let wm_path = rdir.join(layout::WATERMARK);
    let wm = Watermark::decode(&std::fs::read(&wm_path).unwrap(), &wm_path).unwrap();
    assert_eq!(wm.round, rounds);
    let head = Header {
        kind: KIND_PART_SEGMENT,
        id: 0,
        first: 0,
        partition: 0,
        partitions: N,
        name: S.into(),
    }
    .encode()
    .len() as u64;
    let mut ix = ObjectIndex::empty(N);
    ix.round = wm.round;
    for p in 0..N {
        let firsts = layout::part_segments(&rdir, p).unwrap();
        assert!(firsts.len() > 1, "partition {p} has {firsts:?}");
        let ends = firsts[1..]
            .iter()
            .copied()
            .chain([wm.parts[p as usize].next]);
        let mut objects = Vec::new();
        for (&first, end) in firsts.iter().zip(ends) {
            let path = layout::part_segment(&rdir, p, first);
            let len = std::fs::metadata(&path).unwrap().len();
            let f = File::open(&path).unwrap();
            let batches = read_committed(&f, &path, head, len, KIND_REMOTE_BATCH, N).unwrap();
            assert_eq!(batches.len(), 1, "{}: one round's batch", path.display());
            assert_eq!(batches[0].header.first, first);
            assert_eq!(batches[0].header.count as u64, end - first);
            let key = object_key(p, first, end);
            assert_eq!(parse_object_key(&key), Some((p, first, end)));
            objects.push(Object {
                first,
                end,
                bytes: len,
            });
        }
        ix.parts[p as usize] = PartIndex {
            next: wm.parts[p as usize].next,
            objects,
        };
    }
    let ix = ObjectIndex::decode(&ix.encode(), Path::new("index")).unwrap();
    assert_eq!(ix.marks(), wm.parts);
}

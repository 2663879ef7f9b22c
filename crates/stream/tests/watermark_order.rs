//! The watermark order (docs/streams.md "What order means"): strict
//! event time across partitions, an event held until every partition has
//! passed its time, and a silent partition no longer waited for after the
//! idle timeout.

use std::path::Path;
use std::time::Duration;

use paralog_stream::{
    drain_stream, DrainOptions, From, Order, Partitioner, Producer, Reader, RemoteStream,
};

mod common;
use common::{dirs, S};

fn producer(local: &Path, parts: u32, p: u32) -> Producer {
    Producer::open(local, S, parts, Partitioner::Fixed(p)).unwrap()
}

fn put(p: &mut Producer, times: &[i64]) {
    for &t in times {
        p.append(None, format!("t{t}").as_bytes(), Some(t)).unwrap();
    }
    p.flush().unwrap();
}

/// The event times `next_event` gives until it gives `None`.
fn times(r: &mut Reader) -> Vec<i64> {
    let mut out = Vec::new();
    while let Some(d) = r.next_event().unwrap() {
        out.push(d.event.time_ns);
    }
    out
}

fn reader(remote: &Path, order: Order) -> Reader {
    Reader::open(
        RemoteStream::open(remote, S).unwrap(),
        None,
        From::Earliest,
        order,
    )
    .unwrap()
}

#[test]
fn events_wait_for_every_partition_to_pass_their_time() {
    let (_t, local, remote) = dirs();
    let (mut a, mut b) = (producer(&local, 2, 0), producer(&local, 2, 1));
    let opts = DrainOptions::default();
    put(&mut a, &[10, 30, 50]);
    put(&mut b, &[20, 40]);
    drain_stream(&local, &remote, S, &opts).unwrap();
    let long = Order::Watermark {
        idle: Duration::from_secs(600),
    };
    let mut w = reader(&remote, long);
    // 50 waits: partition 1 has not passed it.
    assert_eq!(times(&mut w), vec![10, 20, 30, 40]);
    assert!(w.waiting());
    // Cut order gives partition 0 whole, then 1; time order all of it.
    assert_eq!(
        times(&mut reader(&remote, Order::Cut)),
        vec![10, 30, 50, 20, 40]
    );
    assert_eq!(
        times(&mut reader(&remote, Order::Time)),
        vec![10, 20, 30, 40, 50]
    );

    // Partition 1 passes 50 in a later round; partition 0 then holds 70
    // back until partition 1 passes it too.
    put(&mut b, &[60, 80]);
    put(&mut a, &[70]);
    drain_stream(&local, &remote, S, &opts).unwrap();
    w.refresh().unwrap();
    assert_eq!(times(&mut w), vec![50, 60, 70]);
    assert!(w.waiting(), "80 waits for partition 0");
    put(&mut a, &[90]);
    drain_stream(&local, &remote, S, &opts).unwrap();
    w.refresh().unwrap();
    assert_eq!(times(&mut w), vec![80]);
    assert_eq!(w.late(), 0);
}

#[test]
fn a_silent_partition_is_skipped_after_the_idle_timeout() {
    let (_t, local, remote) = dirs();
    // Three partitions; nothing ever goes to partition 2.
    let (mut a, mut b) = (producer(&local, 3, 0), producer(&local, 3, 1));
    put(&mut a, &[1, 3, 5]);
    put(&mut b, &[2, 4]);
    drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
    let idle = Duration::from_millis(300);
    let mut w = reader(&remote, Order::Watermark { idle });
    let start = std::time::Instant::now();
    assert_eq!(
        times(&mut w),
        Vec::<i64>::new(),
        "partition 2 not silent long enough"
    );
    assert!(w.waiting());
    std::thread::sleep(idle);
    // Partition 2 is skipped now; 5 still waits for partition 1 (whose
    // events were read ahead until now) for its own idle timeout.
    assert_eq!(times(&mut w), vec![1, 2, 3, 4]);
    assert!(start.elapsed() >= idle);
    std::thread::sleep(idle + Duration::from_millis(50));
    assert_eq!(times(&mut w), vec![5]);
    assert!(!w.waiting());
    // A partition that comes back with an older event: handed out at once, late.
    put(&mut b, &[4]);
    drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
    w.refresh().unwrap();
    assert_eq!(times(&mut w), vec![4]);
    assert_eq!(w.late(), 1);
}

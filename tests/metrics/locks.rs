//! Lock acquisitions, releases and timeouts of the queue and lease locks.

use super::*;

#[tokio::test]
async fn lock_acquisitions_releases_and_timeouts_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let client = client();
    let guard = TableGuard::default();
    let table = unique_name("mt-locks");
    guard.add(&table);
    create_lock_table(&client, &table).await.unwrap();
    Seen::take(&snap);

    let queue = QueueLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    let g = queue
        .acquire("q", Wait::For(Duration::from_secs(5)))
        .await
        .unwrap();
    let timed_out = queue
        .acquire("q", Wait::For(Duration::from_millis(200)))
        .await;
    assert!(timed_out.is_err());
    // A waiter queued behind the holder gets the lock handed over when it is released.
    let waiter = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.acquire("q", Wait::For(Duration::from_secs(30))).await })
    };
    let mut polls = 0;
    while queue_rows(&client, &table, "q").await < 2 {
        polls += 1;
        assert!(polls < 400, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    g.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();

    let lease = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_millis(1500))
        .heartbeat_interval(Duration::from_millis(300))
        .clock_skew_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    let l = lease
        .acquire("l", Wait::For(Duration::from_secs(5)))
        .await
        .unwrap();
    let other = LeaseLock::builder(client.clone())
        .table(&table)
        .lease_duration(Duration::from_millis(1500))
        .clock_skew_margin(Duration::from_millis(300))
        .build()
        .unwrap();
    assert!(
        other
            .acquire("l", Wait::For(Duration::from_millis(200)))
            .await
            .is_err()
    );
    l.release().await.unwrap();

    let seen = Seen::take(&snap);
    seen.assert_well_named();
    assert_eq!(
        seen.counter(
            "dynamodb_tx_lock_acquisitions_total",
            &[("lock", "queue"), ("how", "handoff")]
        ),
        1
    );
    assert_eq!(
        seen.counter("dynamodb_tx_lock_releases_total", &[("lock", "queue")]),
        2
    );
    assert_eq!(
        seen.counter("dynamodb_tx_lock_releases_total", &[("lock", "lease")]),
        1
    );
    for lock in ["queue", "lease"] {
        assert_eq!(
            seen.counter(
                "dynamodb_tx_lock_acquisitions_total",
                &[("lock", lock), ("how", "free")]
            ),
            1,
            "{lock}"
        );
        assert_eq!(
            seen.counter(
                "dynamodb_tx_lock_acquisitions_total",
                &[("lock", lock), ("how", "takeover")]
            ),
            0,
            "{lock}"
        );
        assert_eq!(
            seen.counter("dynamodb_tx_lock_timeouts_total", &[("lock", lock)]),
            1,
            "{lock}"
        );
    }
    assert_eq!(seen.counter("dynamodb_tx_lock_lost_total", &[]), 0);
}

/// How many queue entries lock `name` has (holder and waiters), read consistently: the queue
/// lives in the lock's counter item, one `w#<owner>` attribute per entry.
async fn queue_rows(client: &aws_sdk_dynamodb::Client, table: &str, name: &str) -> usize {
    client
        .get_item()
        .table_name(table)
        .key("pk", s(name))
        .key("sk", s("#ctr"))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem")
        .item()
        .map_or(0, |i| i.keys().filter(|k| k.starts_with("w#")).count())
}

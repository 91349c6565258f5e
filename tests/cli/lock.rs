//! `dynamodb-tx lock`: listing holders and waiters.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_list_shows_holder_and_waiter() {
    let env = TestEnv::new("cli-lock").await;
    let table = unique_name("cli-lock-table");
    env.guard.add(&table);
    let locks = QueueLock::builder(env.client.clone())
        .table(&table)
        .lease_duration(Duration::from_secs(30))
        .build()
        .unwrap();
    locks.create_table().await.unwrap();
    let holder = locks.acquire("printer", Wait::NoWait).await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            locks
                .acquire("printer", Wait::For(Duration::from_secs(20)))
                .await
        })
    };
    // Wait (bounded) until the waiter's row is in the queue.
    let mut rows = Value::Null;
    for _ in 0..100 {
        let v = json_of(bin().args(["lock", "list", "printer", "--lock-table", &table]));
        rows = v["rows"].clone();
        let queued = rows
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "queue")
            .count();
        if queued == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = rows.as_array().unwrap().clone();
    let queue: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "queue").collect();
    assert_eq!(queue.len(), 2, "{rows:?}");
    assert_eq!(queue[0]["ticket"], 1);
    assert_eq!(queue[0]["owner"], holder.owner());
    assert_eq!(queue[0]["status"], "holder");
    assert_eq!(queue[1]["ticket"], 2);
    assert_eq!(queue[1]["status"], "waiting");
    let counter: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "counter").collect();
    assert_eq!(counter[0]["last_ticket"], 2);

    bin()
        .args(["lock", "list", "printer", "--lock-table", &table])
        .assert()
        .success()
        .stdout(predicate::str::contains("holder"))
        .stdout(predicate::str::contains("waiting"))
        .stdout(predicate::str::contains(holder.owner()));
    bin()
        .args(["lock", "list", "nobody", "--lock-table", &table])
        .assert()
        .success()
        .stdout(predicate::str::contains("no rows for lock"));
    fails_with(
        bin().args([
            "lock",
            "list",
            "printer",
            "--lock-table",
            "no-such-lock-table",
        ]),
        5,
        &[
            "lock table no-such-lock-table does not exist",
            "--lock-table",
        ],
    );

    holder.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(next.fencing_token(), 2);
    next.release().await.unwrap();
}

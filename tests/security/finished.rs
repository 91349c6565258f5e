//! A finished transaction, resumed by id, accepts no new request and writes nothing.

use super::*;

/// A transaction resumed by id after it committed or rolled back refuses every new request with a
/// typed error, before sending anything: no item changes, no lock appears, the record stays as it
/// was.
#[tokio::test]
async fn a_resumed_finished_transaction_accepts_no_new_request() {
    let env = TestEnv::new("sec-finished").await;
    let t = env.table.clone();
    for commit in [true, false] {
        env.raw_put(&t, original("a")).await;
        env.raw_put(&t, original("b")).await;
        let tx = env.manager.begin();
        let id = tx.id().clone();
        apply_update(&env, &tx, "a").await;
        tx.put_item()
            .table_name(&t)
            .set_item(Some(updated("b")))
            .send()
            .await
            .unwrap();
        let (state, want) = if commit {
            tx.commit().await.unwrap();
            (TxState::Committed, updated("a"))
        } else {
            tx.rollback().await.unwrap();
            (TxState::RolledBack, original("a"))
        };
        let items_before = env.scan_all(&t).await;
        let record_before = env.scan_all(env.manager.transactions_table()).await;
        assert_eq!(env.raw_get(&t, &key("a")).await, Some(want));

        let resumed = env.manager.resume(&id).await.unwrap();
        let sent_before = env.counter.snapshot();
        let finished = |what: &str, got: Result<_, Error>| match (got, state) {
            (Err(Error::AlreadyCommitted { tx_id }), TxState::Committed)
            | (Err(Error::RolledBack { tx_id }), TxState::RolledBack) => {
                assert_eq!(tx_id, id, "{what}")
            }
            (other, _) => panic!("{what} on a {state:?} transaction: got {other:?}"),
        };
        for target in ["a", "b", "new"] {
            finished(
                "put",
                resumed
                    .put_item()
                    .table_name(&t)
                    .set_item(Some(original(target)))
                    .send()
                    .await
                    .map(|_| ()),
            );
            for rv in [ReturnValue::None, ReturnValue::AllOld, ReturnValue::AllNew] {
                finished(
                    "update",
                    resumed
                        .update_item()
                        .table_name(&t)
                        .key("Id", s(target))
                        .update_expression("SET v = :v")
                        .expression_attribute_values(":v", n(9))
                        .return_values(rv)
                        .send()
                        .await
                        .map(|_| ()),
                );
            }
            finished(
                "delete",
                resumed
                    .delete_item()
                    .table_name(&t)
                    .key("Id", s(target))
                    .return_values(ReturnValue::AllOld)
                    .send()
                    .await
                    .map(|_| ()),
            );
            finished(
                "get",
                resumed
                    .get_item()
                    .table_name(&t)
                    .key("Id", s(target))
                    .send()
                    .await
                    .map(|_| ()),
            );
        }
        // Only key-schema lookups may have gone out.
        for (op, count) in env.counter.snapshot() {
            assert!(
                op == "DescribeTable" || sent_before.get(&op) == Some(&count),
                "{op} sent by a finished transaction"
            );
        }
        // Finishing it again agrees with the outcome and changes nothing.
        if commit {
            assert!(matches!(
                env.manager.resume(&id).await.unwrap().rollback().await,
                Err(Error::AlreadyCommitted { .. })
            ));
        } else {
            assert!(
                env.manager
                    .resume(&id)
                    .await
                    .unwrap()
                    .commit()
                    .await
                    .unwrap_err()
                    .is_rolled_back()
            );
        }
        drop(resumed);
        assert_eq!(env.scan_all(&t).await, items_before);
        assert!(env.scan_all(&t).await.iter().all(|i| !has_tx_attrs(i)));
        assert_eq!(
            env.scan_all(env.manager.transactions_table()).await,
            record_before
        );
        assert_eq!(env.tx_state(&id).await, Some((state, true)));
    }
}

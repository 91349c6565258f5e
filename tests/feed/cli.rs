//! `dynamodb-tx feed`: one JSON object a line, values in DynamoDB JSON.

use assert_cmd::Command;
use serde_json::{Value, json};

use crate::common::{TestEnv, endpoint, unique_name};
use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_one_json_object_a_line_and_resumes_from_its_checkpoint() {
    let env = TestEnv::new("feed-cli").await;
    enable_stream(&env.client, &env.table).await;
    env.client
        .put_item()
        .table_name(&env.table)
        .item("Id", s("out"))
        .item("v", n(1))
        .send()
        .await
        .unwrap();
    let tx = env.manager.begin();
    tx.put_item()
        .table_name(&env.table)
        .item("Id", s("a"))
        .item(
            "tags",
            aws_sdk_dynamodb::types::AttributeValue::Ss(vec!["x".into()]),
        )
        .send()
        .await
        .unwrap();
    tx.delete_item()
        .table_name(&env.table)
        .key("Id", s("out"))
        .send()
        .await
        .unwrap();
    let id = tx.id().clone();
    tx.commit().await.unwrap();

    let checkpoints = unique_name("feed-cli-ckpt");
    env.guard.add(&checkpoints);
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"))
            .env_remove("DYNAMODB_TX_TRANSACTIONS_TABLE")
            .args(["--endpoint", endpoint(), "--no-progress"])
            .args(["--transactions-table", env.manager.transactions_table()])
            .args(["feed", "--table", &env.table, "--from-start"])
            .args(["--until-idle", "2s", "--poll-interval", "100ms"])
            .args(["--checkpoint-table", &checkpoints])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object a line"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(
        lines[0],
        json!({"transaction": null, "changes": [{"table": env.table, "key": {"Id": {"S": "out"}},
            "before": null, "after": {"Id": {"S": "out"}, "v": {"N": "1"}}}]})
    );
    assert_eq!(lines[1]["transaction"], json!(id.as_str()));
    let changes = lines[1]["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 2);
    assert!(
        changes.contains(&json!({"table": env.table, "key": {"Id": {"S": "a"}},
        "before": null, "after": {"Id": {"S": "a"}, "tags": {"SS": ["x"]}}}))
    );
    assert!(
        changes.contains(&json!({"table": env.table, "key": {"Id": {"S": "out"}},
        "before": {"Id": {"S": "out"}, "v": {"N": "1"}}, "after": null}))
    );
    // Again, from the saved position: nothing new.
    assert_eq!(run(), "");
}

//! How the binary fails: one-line errors with distinct exit codes, and a reader that goes away.

use super::*;

/// Every class of error is one line on stderr and its own exit code (see `dynamodb-tx --help`).
#[test]
fn error_paths_are_one_line_with_distinct_exit_codes() {
    // No DynamoDB at the endpoint: exit 6, whatever the command.
    for args in [
        &["tx", "list"][..],
        &["tx", "show", "some-id"],
        &["tables", "verify"],
        &["sweep"],
        &["lock", "list", "x", "--lock-table", "locks"],
    ] {
        fails_with(
            bare_bin()
                .args(["--endpoint", "http://127.0.0.1:1"])
                .args(args),
            6,
            &[
                "cannot reach DynamoDB at http://127.0.0.1:1",
                "Connection refused",
                "--endpoint",
            ],
        );
    }

    // No credentials anywhere (a profile that does not exist, an empty home, no instance
    // metadata), against a live endpoint: exit 6 before any request.
    let home = std::env::temp_dir().join(unique_name("cli-empty-home"));
    std::fs::create_dir_all(&home).unwrap();
    let mut c = bare_bin();
    for v in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
    ] {
        c.env_remove(v);
    }
    c.env("AWS_PROFILE", "no-such-profile-for-dynamodb-tx")
        .env("HOME", &home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .args(["--endpoint", endpoint(), "tx", "list"]);
    fails_with(
        &mut c,
        6,
        &[
            "no AWS credentials found",
            "AWS_ACCESS_KEY_ID",
            "AWS_PROFILE=no-such-profile-for-dynamodb-tx",
        ],
    );
    std::fs::remove_dir_all(&home).unwrap();

    // No region and no endpoint: exit 6.
    fails_with(
        bare_bin()
            .env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_CONFIG_FILE")
            .env(
                "HOME",
                std::env::temp_dir().join(unique_name("cli-no-home")),
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .args(["tx", "list"]),
        6,
        &["no AWS region configured", "--region"],
    );

    // Missing tables: exit 5, whichever request finds them missing.
    let tx_table = unique_name("cli-missing-tx");
    let img_table = unique_name("cli-missing-img");
    for args in [
        &["tx", "list"][..],
        &["tx", "show", "some-id"],
        &["tx", "rollback", "some-id"],
        &["tables", "verify"],
        &["sweep"],
    ] {
        fails_with(
            bin()
                .args([
                    "--transactions-table",
                    &tx_table,
                    "--images-table",
                    &img_table,
                ])
                .args(args),
            5,
            &["does not exist", "dynamodb-tx tables create", &tx_table],
        );
    }

    // Bad arguments: exit 2, one line, even where clap would print several.
    for (args, words) in [
        (
            &["tx", "list", "--older-than", "soon"][..],
            &["invalid duration", "--older-than"][..],
        ),
        (
            &["sweep", "--rollback-after", "5x"],
            &["invalid duration", "--rollback-after"],
        ),
        (&["tx", "list", "--bogus"], &["--bogus", "--help"]),
        (&["tx", "show"], &["required", "<ID>"]),
        (&["tx"], &["requires a subcommand", "list, show"]),
        (&[], &["requires a subcommand", "tables, tx, sweep, lock"]),
        (&["frobnicate"], &["frobnicate"]),
        (&["sweep", "--max-passes", "2"], &["--watch"]),
    ] {
        fails_with(bin().args(args), 2, words);
    }

    // --help documents the exit codes.
    bin()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit codes:"))
        .stdout(predicate::str::contains("6  cannot reach DynamoDB"));

    // --help names each variable; it shows a value only for a variable that is set.
    bin()
        .env("AWS_REGION", "eu-west-3")
        .args(["tables", "create", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "[env: DYNAMODB_TX_TRANSACTIONS_TABLE]",
        ))
        .stdout(predicate::str::contains("[env: DYNAMODB_TX_LOCK_TABLE]"))
        .stdout(predicate::str::contains("[env: AWS_REGION=eu-west-3]"))
        .stdout(predicate::str::contains("=]").not());
}

/// A reader that goes away (`dynamodb-tx ... | head -1`) ends the process quietly, like a tool
/// killed by SIGPIPE (exit 141), not with a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_stdout_is_not_a_panic() {
    let env = TestEnv::new("cli-pipe").await;
    abandoned_pending(&env, "a").await;
    for args in [
        &["tx", "list"][..],
        &["sweep", "--dry-run"],
        &["--json", "tx", "list"],
    ] {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_dynamodb-tx"));
        c.env_remove("DYNAMODB_TX_TRANSACTIONS_TABLE")
            .env_remove("DYNAMODB_TX_IMAGES_TABLE")
            .args(["--endpoint", endpoint(), "--no-progress"])
            .args([
                "--transactions-table",
                env.manager.transactions_table(),
                "--images-table",
                env.manager.images_table(),
            ])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        drop(child.stdout.take()); // the reader is gone before anything is printed
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

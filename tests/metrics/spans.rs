//! Tracing: the fields of the `commit` and `rollback` spans.

use super::*;

/// The fields of every closed span named `commit` or `rollback`, as `name -> field -> value`.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(String, SpanFields)>>>);

type SpanFields = HashMap<String, String>;

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

struct Open(Mutex<HashMap<String, String>>);

impl<S> tracing_subscriber::Layer<S> for Captured
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Open(Mutex::new(fields)));
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions().get::<Open>()
        {
            values.record(&mut Fields(&mut open.0.lock().unwrap()));
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(open) = span.extensions().get::<Open>()
        {
            let fields = open.0.lock().unwrap().clone();
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_string(), fields));
        }
    }
}

impl Captured {
    fn spans(&self, name: &str) -> Vec<HashMap<String, String>> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }
}

#[tokio::test]
async fn a_failed_commit_span_carries_its_id_outcome_and_error_kind() {
    use tracing_subscriber::layer::SubscriberExt;
    // A global subscriber: a thread-local one (`set_default`) races with the other tests of this
    // binary over tracing's global callsite interest cache. Spans are told apart by their `tx`.
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    let captured = CAPTURED.get_or_init(|| {
        let c = Captured::default();
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(c.clone()))
            .expect("no other global subscriber in this test binary");
        c
    });
    let env = TestEnv::new("mt-span").await;

    let tx = env.manager.begin();
    let id = tx.id().to_string();
    tx.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("c")), ("v", n(1))])))
        .condition_expression("attribute_exists(Id)")
        .send()
        .await
        .unwrap();
    assert!(tx.commit().await.is_err());

    let ok = env.manager.begin();
    let ok_id = ok.id().to_string();
    ok.put_item()
        .table_name(&env.table)
        .set_item(Some(item(&[("Id", s("d")), ("v", n(1))])))
        .send()
        .await
        .unwrap();
    ok.commit().await.unwrap();

    let rb = env.manager.begin();
    let rb_id = rb.id().to_string();
    rb.get_item()
        .table_name(&env.table)
        .key("Id", s("d"))
        .send()
        .await
        .unwrap();
    rb.rollback().await.unwrap();

    let commits = captured.spans("commit");
    let failed = commits
        .iter()
        .find(|f| f.get("tx") == Some(&id))
        .unwrap_or_else(|| panic!("no commit span for {id}: {commits:?}"));
    assert_eq!(
        failed.get("outcome").map(String::as_str),
        Some("rolled_back")
    );
    assert_eq!(
        failed.get("error.kind").map(String::as_str),
        Some("condition_failed")
    );
    let good = commits
        .iter()
        .find(|f| f.get("tx") == Some(&ok_id))
        .expect("a commit span for the committed transaction");
    assert_eq!(good.get("outcome").map(String::as_str), Some("committed"));
    assert_eq!(good.get("error.kind"), None);

    // `run`'s span says how its last attempt ended and how many attempts it made.
    let table = env.table.clone();
    let err = env
        .manager
        .run(async |tx| {
            tx.delete_item()
                .table_name(&table)
                .key("Id", s("never-there"))
                .condition_expression("attribute_exists(Id)")
                .send()
                .await?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ConditionFailed { .. }), "{err:?}");
    let runs = captured.spans("run");
    assert!(
        runs.iter().any(
            |f| f.get("outcome").map(String::as_str) == Some("rolled_back")
                && f.get("error.kind").map(String::as_str) == Some("condition_failed")
                && f.get("attempts").map(String::as_str) == Some("1")
        ),
        "{runs:?}"
    );

    let rollbacks = captured.spans("rollback");
    let rolled = rollbacks
        .iter()
        .find(|f| f.get("tx") == Some(&rb_id) && f.contains_key("outcome"))
        .unwrap_or_else(|| {
            panic!(
                "no rollback span for {rb_id}: {rollbacks:?} {:?}",
                captured.0.lock().unwrap()
            )
        });
    assert_eq!(
        rolled.get("outcome").map(String::as_str),
        Some("rolled_back")
    );
}

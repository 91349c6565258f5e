//! What the stateright model checks share: running a model breadth-first on every core, and
//! turning its discoveries into test failures.

use std::fmt::Debug;
use std::hash::Hash;

use stateright::{Checker, Expectation, HasDiscoveries, Model};

/// Explores every reachable state of `model` (breadth-first, one thread per core). With
/// `stop_at_failure` (a deliberately broken variant), stops at the first counterexample.
pub fn check<M>(model: M, stop_at_failure: bool) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let builder = model.checker().threads(threads);
    let builder = if stop_at_failure {
        builder.finish_when(HasDiscoveries::AnyFailures)
    } else {
        builder
    };
    builder.spawn_bfs().join()
}

/// Checks `model` (`stop_at_failure` as for [`check`]) and fails the test if an `always`/`eventually` property has a counterexample
/// (printing the path to it) or a `sometimes` property is never reached; prints the figures.
pub fn assert_model_holds<M>(name: &str, model: M, stop_at_failure: bool)
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let started = std::time::Instant::now();
    let checker = check(model, stop_at_failure);
    println!(
        "{name}: {} states ({} unique), max depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    for p in checker.model().properties() {
        let found = checker.discovery(p.name);
        match p.expectation {
            Expectation::Always | Expectation::Eventually => {
                if let Some(path) = found {
                    if std::env::var_os("MODEL_TRACE").is_some() {
                        for (state, action) in path.clone().into_vec() {
                            println!("{state:?}\n  -> {action:?}");
                        }
                    }
                    let last = path.last_state().clone();
                    let steps: Vec<String> = path
                        .into_actions()
                        .iter()
                        .map(|a| format!("{a:?}"))
                        .collect();
                    panic!(
                        "{name}: `{}` violated after\n  {}\nin state {last:#?}",
                        p.name,
                        steps.join("\n  ")
                    );
                }
            }
            Expectation::Sometimes => {
                assert!(found.is_some(), "{name}: `{}` never happens", p.name);
            }
        }
    }
}

/// Checks `model`, a deliberately broken variant named `what`, until its first counterexample, and
/// fails the test unless a property of one of `kinds` (`always`, and `eventually` where given) is
/// violated; prints the ones that are.
#[allow(dead_code)] // Not every model has broken variants.
pub fn assert_caught<M>(what: &str, model: M, kinds: &[Expectation])
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let checker = check(model, true);
    let violated: Vec<&str> = checker
        .model()
        .properties()
        .into_iter()
        .filter(|p| kinds.contains(&p.expectation))
        .filter(|p| checker.discovery(p.name).is_some())
        .map(|p| p.name)
        .collect();
    println!("{what}: caught by {violated:?}");
    assert!(!violated.is_empty(), "{what} was not caught");
}

//! Hooks that hold a coordinator at an exact request while another coordinator runs.

pub type Hook = Box<dyn FnOnce() + Send>;

/// Runs a hook just before the first request of one DynamoDB operation (`"*"`: any operation)
/// whose body contains a given text (or, armed later with [`RunBefore::arm`], every one of given
/// texts) is sent; that request waits until the hook is done. The hook runs on its own thread
/// with its own runtime (interceptors are synchronous), so it can drive another coordinator with
/// its own client while this one is held at that exact point.
#[derive(Clone)]
pub struct RunBefore {
    operation: &'static str,
    /// Texts the request's body must all contain; `None`: not armed yet.
    needles: std::sync::Arc<std::sync::Mutex<Option<Vec<String>>>>,
    hook: std::sync::Arc<std::sync::Mutex<Option<Hook>>>,
}

impl std::fmt::Debug for RunBefore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunBefore")
            .field("operation", &self.operation)
            .finish()
    }
}

impl RunBefore {
    pub fn new(
        operation: &'static str,
        needle: &str,
        hook: impl FnOnce() + Send + 'static,
    ) -> Self {
        let r = RunBefore::unarmed(operation, hook);
        r.arm(&[needle]);
        r
    }

    /// A hook that waits for [`RunBefore::arm`]: what it must match is learnt while the test runs
    /// (a transaction's id, say).
    pub fn unarmed(operation: &'static str, hook: impl FnOnce() + Send + 'static) -> Self {
        RunBefore {
            operation,
            needles: std::sync::Arc::default(),
            hook: std::sync::Arc::new(std::sync::Mutex::new(Some(Box::new(hook)))),
        }
    }

    /// From now on, the first request whose body contains every one of `needles` runs the hook.
    pub fn arm(&self, needles: &[&str]) {
        *self.needles.lock().unwrap() = Some(needles.iter().map(|n| n.to_string()).collect());
    }

    pub fn ran(&self) -> bool {
        self.hook.lock().unwrap().is_none()
    }
}

impl aws_sdk_dynamodb::config::Intercept for RunBefore {
    fn name(&self) -> &'static str {
        "RunBefore"
    }

    fn read_before_transmit(
        &self,
        ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _rc: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        let req = ctx.request();
        let target = req.headers().get("x-amz-target").unwrap_or_default();
        if self.operation != "*" && !target.ends_with(&format!(".{}", self.operation)) {
            return Ok(());
        }
        let body = req
            .body()
            .bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let matches = self
            .needles
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|ns| ns.iter().all(|n| body.contains(n.as_str())));
        if !matches {
            return Ok(());
        }
        let Some(hook) = self.hook.lock().unwrap().take() else {
            return Ok(());
        };
        let run = || std::thread::spawn(hook).join().expect("the hook panicked");
        // On a multi-threaded runtime the held request's worker hands its other tasks over
        // first: a task left in a blocked worker's queue (a connection of another client, say)
        // would wait for the hook too.
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
            _ => run(),
        }
        Ok(())
    }
}

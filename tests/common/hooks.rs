//! Hooks that hold a coordinator at an exact request while another coordinator runs.

pub type Hook = Box<dyn FnOnce() + Send>;

/// Runs a hook just before the first request of one DynamoDB operation (`"*"`: any operation)
/// whose body contains a given text is sent; that request waits until the hook is done. The hook runs on its own thread
/// with its own runtime (interceptors are synchronous), so it can drive another coordinator with
/// its own client while this one is held at that exact point.
#[derive(Clone)]
pub struct RunBefore {
    operation: &'static str,
    needle: String,
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
        RunBefore {
            operation,
            needle: needle.to_string(),
            hook: std::sync::Arc::new(std::sync::Mutex::new(Some(Box::new(hook)))),
        }
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
        if !body.contains(&self.needle) {
            return Ok(());
        }
        let Some(hook) = self.hook.lock().unwrap().take() else {
            return Ok(());
        };
        std::thread::spawn(hook).join().expect("the hook panicked");
        Ok(())
    }
}

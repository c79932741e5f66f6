//! The chat requests the tests send: the model id and the request bodies.

/// The model id.
pub const MODEL: &str = "reasoning-model-k3";

/// A chat request body with one user message and extra members.
pub fn body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"What is two plus two?"}}]{extra}}}"#
    )
}

/// The same, streamed.
pub fn stream_body(extra: &str) -> String {
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(",{extra}")
    };
    body(&format!(r#""stream":true{extra}"#))
}

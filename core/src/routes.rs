//! The public API's paths, and which methods each allows.

use crate::error::ApiError;
use crate::http::Method;

/// The path of the chat endpoint.
pub(crate) const CHAT_PATH: &str = "/v1/chat/completions";
/// The path of the model list.
pub(crate) const MODELS_PATH: &str = "/v1/models";

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `POST /v1/chat/completions`: metered.
    Chat,
    /// `GET` or `HEAD /v1/models`.
    Models,
}

/// Routes a request: 404 for an unknown path, 405 (with `Allow`) for a
/// known path and the wrong method.
pub(crate) fn route(method: Method, path: &str) -> Result<Route, ApiError> {
    let (allowed, allow, route) = match path {
        MODELS_PATH => (
            matches!(method, Method::Get | Method::Head),
            "GET, HEAD",
            Route::Models,
        ),
        CHAT_PATH => (method == Method::Post, "POST", Route::Chat),
        _ => return Err(ApiError::unknown_url(method.as_str(), path)),
    };
    if allowed {
        Ok(route)
    } else {
        Err(ApiError::method_not_allowed(method.as_str(), allow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods() {
        assert_eq!(route(Method::Post, CHAT_PATH), Ok(Route::Chat));
        assert_eq!(route(Method::Get, MODELS_PATH), Ok(Route::Models));
        assert_eq!(route(Method::Head, MODELS_PATH), Ok(Route::Models));
        let e = route(Method::Get, CHAT_PATH).unwrap_err();
        assert_eq!((e.status, e.allow), (405, Some("POST")));
        let e = route(Method::Post, MODELS_PATH).unwrap_err();
        assert_eq!((e.status, e.allow), (405, Some("GET, HEAD")));
        assert_eq!(
            route(Method::Post, "/v1/embeddings").unwrap_err().status,
            404
        );
    }
}

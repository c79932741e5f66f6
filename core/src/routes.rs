//! The public API's paths, and which methods each allows.

use crate::error::ApiError;
use crate::http::Method;

/// The client-facing APIs beside chat completions, which is always
/// served (the specification's API): `--apis chat,responses,messages`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Apis {
    /// The OpenAI Responses API, `POST /v1/responses`.
    pub responses: bool,
    /// The Anthropic Messages API, `POST /v1/messages`.
    pub messages: bool,
    /// The Responses API keeps responses (`--responses-store` not `off`):
    /// `GET` and `DELETE /v1/responses/{id}`, its `input_items` and
    /// `cancel`.
    pub stored: bool,
}

impl Apis {
    /// Parses `--apis`: a comma-separated list of `chat`, `responses` and
    /// `messages` (chat is served whether listed or not); any other name
    /// is refused.
    pub fn parse(list: &str) -> Result<Apis, String> {
        let mut apis = Apis::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "chat" => {}
                "responses" => apis.responses = true,
                "messages" => apis.messages = true,
                other => return Err(format!("'{other}' is not an API this gateway serves")),
            }
        }
        Ok(apis)
    }
}

/// The path of the chat endpoint.
pub(crate) const CHAT_PATH: &str = "/v1/chat/completions";
/// The path of the model list.
pub(crate) const MODELS_PATH: &str = "/v1/models";
/// The path of the Responses API (with `--apis responses`).
pub(crate) const RESPONSES_PATH: &str = "/v1/responses";
/// The path of the Messages API (with `--apis messages`).
pub(crate) const MESSAGES_PATH: &str = "/v1/messages";
/// The Messages API's token count (with `--apis messages`).
pub(crate) const COUNT_TOKENS_PATH: &str = "/v1/messages/count_tokens";

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// `POST /v1/chat/completions`: metered.
    Chat,
    /// `GET` or `HEAD /v1/models`.
    Models,
    /// `POST /v1/responses`: metered, translated onto the chat exchange.
    Responses,
    /// `POST /v1/messages`: metered, translated onto the chat exchange.
    Messages,
    /// `POST /v1/messages/count_tokens`: the prompt's token estimate, not
    /// metered (the provider is not asked).
    CountTokens,
    /// `GET` or `DELETE /v1/responses/{id}`: a kept response.
    StoredResponse,
    /// `GET /v1/responses/{id}/input_items`.
    InputItems,
    /// `POST /v1/responses/{id}/cancel`.
    Cancel,
}

impl Route {
    /// Whether requests on it are metered (a chat exchange).
    pub(crate) fn is_chat(self) -> bool {
        matches!(self, Route::Chat | Route::Responses | Route::Messages)
    }
}

/// Routes a request: 404 for an unknown path (the extra APIs' paths are
/// unknown unless `apis` turns them on), 405 (with `Allow`) for a known
/// path and the wrong method.
pub(crate) fn route(method: Method, path: &str, apis: Apis) -> Result<Route, ApiError> {
    let route = served(path, apis).ok_or_else(|| ApiError::unknown_url(method.as_str(), path))?;
    let (allowed, allow) = match route {
        Route::Models => (matches!(method, Method::Get | Method::Head), "GET, HEAD"),
        Route::StoredResponse => (
            matches!(method, Method::Get | Method::Delete),
            "GET, DELETE",
        ),
        Route::InputItems => (method == Method::Get, "GET"),
        _ => (method == Method::Post, "POST"),
    };
    if allowed {
        Ok(route)
    } else {
        Err(ApiError::method_not_allowed(method.as_str(), allow))
    }
}

/// What `path` names, when it is served (whatever the method).
pub(crate) fn served(path: &str, apis: Apis) -> Option<Route> {
    Some(match path {
        MODELS_PATH => Route::Models,
        CHAT_PATH => Route::Chat,
        RESPONSES_PATH if apis.responses => Route::Responses,
        MESSAGES_PATH if apis.messages => Route::Messages,
        COUNT_TOKENS_PATH if apis.messages => Route::CountTokens,
        _ if apis.stored => match stored_response(path)? {
            (_, None) => Route::StoredResponse,
            (_, Some("input_items")) => Route::InputItems,
            (_, Some("cancel")) => Route::Cancel,
            _ => return None,
        },
        _ => return None,
    })
}

/// `/v1/responses/{id}` and `/v1/responses/{id}/{what}`: the id (percent
/// escapes decoded) and what.
pub(crate) fn stored_response(path: &str) -> Option<(String, Option<&str>)> {
    let rest = path.strip_prefix("/v1/responses/")?;
    let (id, what) = match rest.split_once('/') {
        Some((id, what)) => (id, Some(what)),
        None => (rest, None),
    };
    let id = crate::url::percent_decode(id).filter(|id| !id.is_empty())?;
    Some((id, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_chat(method: Method, path: &str) -> Result<Route, ApiError> {
        route(method, path, Apis::default())
    }

    #[test]
    fn the_responses_path_is_unknown_unless_turned_on() {
        let on = Apis {
            responses: true,
            messages: false,
            stored: false,
        };
        assert_eq!(
            route_chat(Method::Post, RESPONSES_PATH).unwrap_err().status,
            404
        );
        assert_eq!(
            route(Method::Post, RESPONSES_PATH, on),
            Ok(Route::Responses)
        );
        assert_eq!(
            route(Method::Get, RESPONSES_PATH, on).unwrap_err().status,
            405
        );
    }

    #[test]
    fn the_messages_path_is_unknown_unless_turned_on() {
        let on = Apis {
            responses: false,
            messages: true,
            stored: false,
        };
        assert_eq!(
            route_chat(Method::Post, MESSAGES_PATH).unwrap_err().status,
            404
        );
        assert_eq!(
            route(Method::Post, RESPONSES_PATH, on).unwrap_err().status,
            404
        );
        assert_eq!(route(Method::Post, MESSAGES_PATH, on), Ok(Route::Messages));
        assert_eq!(
            route(Method::Post, COUNT_TOKENS_PATH, on),
            Ok(Route::CountTokens)
        );
        assert_eq!(
            route_chat(Method::Post, COUNT_TOKENS_PATH)
                .unwrap_err()
                .status,
            404
        );
        assert_eq!(
            route(Method::Get, MESSAGES_PATH, on).unwrap_err().status,
            405
        );
    }

    #[test]
    fn paths_and_methods() {
        assert_eq!(route_chat(Method::Post, CHAT_PATH), Ok(Route::Chat));
        assert_eq!(route_chat(Method::Get, MODELS_PATH), Ok(Route::Models));
        assert_eq!(route_chat(Method::Head, MODELS_PATH), Ok(Route::Models));
        let e = route_chat(Method::Get, CHAT_PATH).unwrap_err();
        assert_eq!((e.status, e.allow), (405, Some("POST")));
        let e = route_chat(Method::Post, MODELS_PATH).unwrap_err();
        assert_eq!((e.status, e.allow), (405, Some("GET, HEAD")));
        assert_eq!(
            route_chat(Method::Post, "/v1/embeddings")
                .unwrap_err()
                .status,
            404
        );
    }
}

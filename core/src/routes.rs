//! The public API's paths, and which methods each allows.

use crate::error::ApiError;
use crate::http::Method;

/// The client-facing APIs beside chat completions, which is always
/// served (the specification's API): `--apis chat,responses,messages,gemini`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Apis {
    /// The OpenAI Responses API, `POST /v1/responses`.
    pub responses: bool,
    /// The Anthropic Messages API, `POST /v1/messages`.
    pub messages: bool,
    /// Google's Gemini API, `POST /v1beta/models/{model}:generateContent`
    /// and the rest of what Gemini CLI calls.
    pub gemini: bool,
    /// The Responses API keeps responses (`--responses-store` not `off`):
    /// `GET` and `DELETE /v1/responses/{id}`, its `input_items` and
    /// `cancel`.
    pub stored: bool,
}

impl Apis {
    /// Every value `--apis` takes.
    pub const NAMES: &'static str = "chat, responses, messages, gemini";

    /// Parses `--apis`: a comma-separated list of [`Apis::NAMES`] (chat is
    /// served whether listed or not); any other name is refused.
    pub fn parse(list: &str) -> Result<Apis, String> {
        let mut apis = Apis::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "chat" => {}
                "responses" => apis.responses = true,
                "messages" => apis.messages = true,
                "gemini" => apis.gemini = true,
                other => {
                    return Err(format!(
                        "'{other}' is not an API this gateway serves (it serves {})",
                        Apis::NAMES
                    ));
                }
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

/// The Gemini API's model list (with `--apis gemini`).
pub(crate) const GEMINI_MODELS_PATH: &str = "/v1beta/models";

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
    /// `POST /v1beta/models/{model}:generateContent` (or
    /// `:streamGenerateContent`): metered, translated onto the chat
    /// exchange.
    Gemini,
    /// `POST /v1beta/models/{model}:countTokens`: the prompt's token
    /// estimate, not metered.
    GeminiCount,
    /// `GET /v1beta/models`: the key's models in the Gemini API's shape.
    GeminiModels,
    /// `GET /v1beta/models/{model}`: one of them.
    GeminiModel,
}

/// The Gemini API's methods on a model, after its last `:`.
const GEMINI_METHODS: [&str; 3] = ["generateContent", "streamGenerateContent", "countTokens"];

/// What a Gemini API path names: `models/{model}` and its method (`None`
/// for a model's own path, whose model may hold a `:`, as `qwen3:8b`
/// does). The model is percent decoded and may hold `/` (a provider's
/// `org/model` name). Under `/v1/` only the methods are served: `GET
/// /v1/models/{id}` is the OpenAI API's.
pub(crate) fn gemini_path(path: &str) -> Option<(String, Option<&str>)> {
    let (rest, v1) = match path.strip_prefix("/v1beta/models/") {
        Some(rest) => (rest, false),
        None => (path.strip_prefix("/v1/models/")?, true),
    };
    let (model, method) = match rest.rsplit_once(':') {
        Some((m, method)) if GEMINI_METHODS.contains(&method) => (m, Some(method)),
        // Another method of Google's (`embedContent`): not served.
        Some((_, method)) if method_like(method) => return None,
        // A tag of the model's name (`qwen3:8b`, `m:latest`).
        _ => (rest, None),
    };
    if v1 && method.is_none() {
        return None;
    }
    let model = crate::url::percent_decode(model).filter(|m| !m.is_empty())?;
    Some((model, method))
}

/// Whether `s` reads as a method name of Google's API: letters only, in
/// lower camel case (`embedContent`), which a model's tag (`8b`, `latest`,
/// `q4_K_M`) is not.
fn method_like(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.bytes().all(|b| b.is_ascii_alphabetic())
        && s.bytes().any(|b| b.is_ascii_uppercase())
}

impl Route {
    /// Whether requests on it are metered (a chat exchange).
    pub(crate) fn is_chat(self) -> bool {
        matches!(
            self,
            Route::Chat | Route::Responses | Route::Messages | Route::Gemini
        )
    }
}

/// Routes a request: 404 for an unknown path (the extra APIs' paths are
/// unknown unless `apis` turns them on), 405 (with `Allow`) for a known
/// path and the wrong method.
pub(crate) fn route(method: Method, path: &str, apis: Apis) -> Result<Route, ApiError> {
    let route = served(path, apis).ok_or_else(|| ApiError::unknown_url(method.as_str(), path))?;
    let (allowed, allow) = match route {
        Route::Models | Route::GeminiModels | Route::GeminiModel => {
            (matches!(method, Method::Get | Method::Head), "GET, HEAD")
        }
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
        GEMINI_MODELS_PATH if apis.gemini => Route::GeminiModels,
        _ => return other(path, apis),
    })
}

/// What a path beyond the fixed ones names: a Gemini model or one of its
/// methods, or a kept response (the path parsed once).
fn other(path: &str, apis: Apis) -> Option<Route> {
    if apis.gemini
        && let Some((_, method)) = gemini_path(path)
    {
        return match method {
            Some("generateContent" | "streamGenerateContent") => Some(Route::Gemini),
            Some("countTokens") => Some(Route::GeminiCount),
            Some(_) => None,
            None => Some(Route::GeminiModel),
        };
    }
    if !apis.stored {
        return None;
    }
    Some(match stored_response(path)? {
        (_, None) => Route::StoredResponse,
        (_, Some("input_items")) => Route::InputItems,
        (_, Some("cancel")) => Route::Cancel,
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
            ..Apis::default()
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
            messages: true,
            ..Apis::default()
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

    #[test]
    fn the_gemini_paths_are_unknown_unless_turned_on() {
        let on = Apis {
            gemini: true,
            ..Apis::default()
        };
        let stream = "/v1beta/models/gemini-2.5-pro:streamGenerateContent";
        assert_eq!(route_chat(Method::Post, stream).unwrap_err().status, 404);
        assert_eq!(route(Method::Post, stream, on), Ok(Route::Gemini));
        let slashed = "/v1beta/models/org/some%20model:generateContent";
        assert_eq!(route(Method::Post, slashed, on), Ok(Route::Gemini));
        assert_eq!(
            gemini_path(slashed),
            Some(("org/some model".to_owned(), Some("generateContent")))
        );
        let count = "/v1/models/m:countTokens";
        assert_eq!(route(Method::Post, count, on), Ok(Route::GeminiCount));
        assert_eq!(
            route(Method::Get, GEMINI_MODELS_PATH, on),
            Ok(Route::GeminiModels)
        );
        assert_eq!(
            route(Method::Get, "/v1beta/models/m", on),
            Ok(Route::GeminiModel)
        );
        let e = route(Method::Get, stream, on).unwrap_err();
        assert_eq!((e.status, e.allow), (405, Some("POST")));
        let unknown = "/v1beta/models/m:embedContent";
        assert_eq!(route(Method::Post, unknown, on).unwrap_err().status, 404);
        // A model whose name holds a `:`.
        assert_eq!(
            gemini_path("/v1beta/models/qwen3:8b"),
            Some(("qwen3:8b".to_owned(), None))
        );
        assert_eq!(
            route(Method::Get, "/v1beta/models/qwen3:8b", on),
            Ok(Route::GeminiModel)
        );
        assert_eq!(
            route(Method::Post, "/v1beta/models/qwen3:8b:generateContent", on),
            Ok(Route::Gemini)
        );
        // The OpenAI model list stays the OpenAI one.
        assert_eq!(route(Method::Get, MODELS_PATH, on), Ok(Route::Models));
        assert_eq!(
            route(Method::Get, "/v1/models/m", on).unwrap_err().status,
            404
        );
    }
}

//! The model list as Google's API answers it (`GET /v1beta/models`,
//! `GET /v1beta/models/{id}`): each of the gateway's models as a `Model`
//! that supports the three methods it serves. The token limits are left
//! out: the gateway does not know them.

/// The methods every model is served with.
const METHODS: &[u8] = b"[\"generateContent\",\"streamGenerateContent\",\"countTokens\"]";

/// `GET /v1beta/models`: `{"models":[…]}` for the given ids.
pub fn list_body<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<u8> {
    let mut out = b"{\"models\":[".to_vec();
    for (i, id) in ids.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        model(&mut out, id);
    }
    out.extend_from_slice(b"]}");
    out
}

/// `GET /v1beta/models/{id}`: one model.
pub fn model_body(id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(200 + 3 * id.len());
    model(&mut out, id);
    out
}

/// `{"name":"models/ID","baseModelId":"ID","version":"","displayName":"ID",…}`.
fn model(out: &mut Vec<u8>, id: &str) {
    let string = |out: &mut Vec<u8>, s: &str| crate::json::write::string(out, s);
    out.extend_from_slice(b"{\"name\":");
    string(out, &format!("models/{id}"));
    out.extend_from_slice(b",\"baseModelId\":");
    string(out, id);
    out.extend_from_slice(b",\"version\":\"\",\"displayName\":");
    string(out, id);
    out.extend_from_slice(b",\"description\":\"\",\"supportedGenerationMethods\":");
    out.extend_from_slice(METHODS);
    out.push(b'}');
}

//! `messages`, checked while the pass reads it: its syntax as the pass
//! checks any value's, and the reference's rules for each message, whose
//! finding (the first error, in the order the reference checks) is kept
//! until the pass has read the whole body — a syntax error anywhere comes
//! first.
//!
//! A message's members come in any order, and what its content parts may
//! hold depends on its role: each part is judged for a `user` message and
//! for any other, and the role picks one at the message's end.

use std::borrow::Cow;

use super::checked::{KeySet, duplicate_in};
use super::params::check_tool_calls;
use super::{IMAGE_TOKEN_ESTIMATE, Param, ROLES};
use crate::error::ApiError;
use crate::json::{Cursor, ESCAPED, Key, Keys, Stop, plain_string};

/// What `messages` holds that the rest of validation needs.
#[derive(Debug, Default)]
pub(super) struct Checked {
    /// The prompt estimate (see [`super::ChatRequest`]).
    pub(super) estimate: u64,
    /// Indices of the assistant messages carrying `reasoning_content`.
    pub(super) strip: Vec<usize>,
}

/// What is wrong with `messages` (boxed: the usual finding is small).
pub(super) type Refused = Box<ApiError>;

/// Reads `messages` at the cursor; the finding on its contents.
pub(super) fn read(
    c: &mut Cursor<'_>,
    keys: &mut KeySet,
) -> Result<Result<Checked, Refused>, Stop> {
    if c.peek() != Some(b'[') {
        c.skip()?;
        return Ok(Err(Box::new(ApiError::invalid_type(
            "messages", "an array",
        ))));
    }
    let mut finding = Ok(Checked {
        estimate: 3,
        strip: Vec::new(),
    });
    let mut n = 0;
    c.elements(|c| {
        let i = n;
        n += 1;
        match &mut finding {
            Ok(checked) => match message(c, keys, i)? {
                Ok((estimate, strip)) => {
                    checked.estimate += estimate;
                    if strip {
                        checked.strip.push(i);
                    }
                }
                Err(e) => finding = Err(e),
            },
            // The finding is in; the rest is read for its syntax only.
            Err(_) => c.skip()?,
        }
        Ok(())
    })?;
    if n == 0 {
        return Ok(Err(Box::new(ApiError::invalid_value(
            "messages",
            "'messages' must contain at least one message.",
        ))));
    }
    Ok(finding)
}

/// The roles a message may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A member by what the rules ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found<T> {
    Absent,
    /// Not the kind of value the rules want.
    Other,
    Is(T),
}

/// A message's `content` as far as the rules need it.
#[derive(Debug, Clone, Copy)]
enum Content {
    Absent,
    Null,
    /// A string: its raw length, quotes included.
    Text(usize),
    Parts(Parts),
    /// Any other value.
    Other,
}

/// Content parts: how many, their estimate (for a user message), and the
/// first part that is wrong for a user message and for any other.
#[derive(Debug, Clone, Copy, Default)]
struct Parts {
    count: usize,
    estimate: u64,
    wrong_for_user: Option<(usize, Wrong)>,
    wrong_for_others: Option<(usize, Wrong)>,
}

/// What is wrong with a content part, in the order the reference looks.
#[derive(Debug, Clone, Copy)]
enum Wrong {
    NotAnObject,
    /// A member name repeats (the part's range).
    Repeated(usize, usize),
    TypeMissing,
    TypeNotAString,
    TypeUnknown,
    TextMissing,
    TextNotAString,
    ImageElsewhere,
    ImageUrlMissing,
    ImageUrlNotAnObject,
    /// A member name of `image_url` repeats (its range).
    ImageUrlRepeated(usize, usize),
    UrlMissing,
    UrlNotAString,
    UrlInvalid,
}

/// A message at the cursor (the `i`th): its estimate and whether its
/// `reasoning_content` is to be stripped, or what is wrong with it.
#[inline(always)]
fn message(
    c: &mut Cursor<'_>,
    keys: &mut KeySet,
    i: usize,
) -> Result<Result<(u64, bool), Refused>, Stop> {
    let start = c.at();
    let mut m = Message {
        object: c.text().get(start) == Some(&b'{'),
        repeated: false,
        role: Found::Absent,
        content: Content::Absent,
        tool_calls: None,
        id: Found::Absent,
        reasoning: false,
    };
    if !m.object {
        c.skip()?;
    } else if let Some(i) = c.open_object()? {
        let base = keys.len();
        let mut seen = 0u8;
        // The usual message starts with a plain role and its content.
        let (from, first) = match usual_start(c, i)? {
            Some((role, content, after)) => {
                m.role = Found::Is(Some(role));
                m.content = Content::Text(content);
                seen = ROLE | CONTENT;
                (after, false)
            }
            None => (i, true),
        };
        c.members_from(from, Keys::Skipped, first, |c, key| {
            let v = c.at();
            let member = if key.escaped {
                message_member(&c.name(key))
            } else {
                message_member(c.raw_name(key))
            };
            match member {
                ROLE => m.role = read_role(c)?,
                CONTENT => m.content = read_content(c, keys)?,
                TOOL_CALLS => {
                    c.skip()?;
                    m.tool_calls = (c.text().get(v) != Some(&b'n')).then_some((v, c.at()));
                }
                TOOL_CALL_ID => {
                    m.id = if c.text().get(v) == Some(&b'"') {
                        Found::Is(())
                    } else {
                        Found::Other
                    };
                    c.skip()?;
                }
                REASONING => {
                    m.reasoning = true;
                    c.skip()?;
                }
                _ => {
                    keys.push(key);
                    c.skip()?;
                }
            }
            m.repeated |= seen & member != 0;
            seen |= member;
            Ok(())
        })?;
        m.repeated |= keys.repeats(c, base);
        keys.truncate(base);
    }
    Ok(m.judge(c.text(), i)
        .map_err(|wrong| Box::new(wrong.error(c.text(), (start, c.at()), i))))
}

/// The start of the usual message from `i` (its first name): a role and
/// its content, in either order, without whitespace or escapes in the names
/// and the role (`"role":"user","content":"…"`): the role, the content's
/// raw length and where they end. `None` (nothing read) for any other
/// start: the general reading reads it. The content is read as any string
/// is.
#[inline(always)]
fn usual_start(c: &mut Cursor<'_>, i: usize) -> Result<Option<(Role, usize, usize)>, Stop> {
    // The role then the content's name, up to its opening quote.
    const ROLE_FIRST: [(&[u8], Role); 3] = [
        (b"\"role\":\"user\",\"content\":\"", Role::User),
        (b"\"role\":\"system\",\"content\":\"", Role::System),
        (b"\"role\":\"assistant\",\"content\":\"", Role::Assistant),
    ];
    // After the content: the role.
    const ROLE_LAST: [(&[u8], Role); 3] = [
        (b",\"role\":\"user\"", Role::User),
        (b",\"role\":\"system\"", Role::System),
        (b",\"role\":\"assistant\"", Role::Assistant),
    ];
    const CONTENT_FIRST: &[u8] = b"\"content\":\"";
    let s = c.text();
    let rest = &s[i..];
    for (start, role) in ROLE_FIRST {
        if rest.starts_with(start) {
            let open = i + start.len() - 1;
            let after = c.string_at(open)?;
            return Ok(Some((role, after - open, after)));
        }
    }
    if rest.starts_with(CONTENT_FIRST) {
        let open = i + CONTENT_FIRST.len() - 1;
        // Read before the role is known: nothing is read unless the role
        // follows at once.
        let Ok(after) = plain_string(s, open + 1) else {
            return Ok(None);
        };
        for (end, role) in ROLE_LAST {
            if s[after..].starts_with(end) {
                return Ok(Some((role, after - open, after + end.len())));
            }
        }
    }
    Ok(None)
}

/// A message as far as the rules need it.
struct Message {
    object: bool,
    repeated: bool,
    role: Found<Option<Role>>,
    content: Content,
    tool_calls: Option<(usize, usize)>,
    id: Found<()>,
    reasoning: bool,
}

/// What is wrong with a message, in the order the reference looks.
enum MessageWrong {
    NotAnObject,
    Repeated,
    RoleMissing,
    RoleNotAString,
    RoleUnknown,
    ToolCallsElsewhere,
    ToolCalls(ApiError),
    ContentMissing,
    ContentEmpty,
    Part(usize, Wrong),
    ContentNotAStringOrParts,
    IdMissing,
    IdNotAString,
}

impl Message {
    /// Its estimate and whether its `reasoning_content` is to be stripped
    /// (`s` is the body, `i` its index), or what is wrong with it.
    #[inline(always)]
    fn judge(&self, s: &[u8], i: usize) -> Result<(u64, bool), MessageWrong> {
        if !self.object {
            return Err(MessageWrong::NotAnObject);
        }
        if self.repeated {
            return Err(MessageWrong::Repeated);
        }
        let role = match self.role {
            Found::Absent => return Err(MessageWrong::RoleMissing),
            Found::Other => return Err(MessageWrong::RoleNotAString),
            Found::Is(None) => return Err(MessageWrong::RoleUnknown),
            Found::Is(Some(role)) => role,
        };
        let assistant = role == Role::Assistant;
        let mut estimate = 4;
        if let Some((a, b)) = self.tool_calls {
            if !assistant {
                return Err(MessageWrong::ToolCallsElsewhere);
            }
            let root = Param::root("messages");
            let m = root.index(i);
            check_tool_calls(&s[a..b], m.key("tool_calls")).map_err(MessageWrong::ToolCalls)?;
            estimate += ((b - a) as u64).div_ceil(4);
        }
        estimate += match self.content {
            Content::Absent if assistant && self.tool_calls.is_some() => 0,
            Content::Absent => return Err(MessageWrong::ContentMissing),
            Content::Text(len) => (len as u64).saturating_sub(2).div_ceil(4),
            Content::Null if assistant => 0,
            Content::Parts(parts) if parts.count == 0 => return Err(MessageWrong::ContentEmpty),
            Content::Parts(parts) => {
                let wrong = if role == Role::User {
                    parts.wrong_for_user
                } else {
                    parts.wrong_for_others
                };
                if let Some((j, wrong)) = wrong {
                    return Err(MessageWrong::Part(j, wrong));
                }
                parts.estimate
            }
            Content::Null | Content::Other => return Err(MessageWrong::ContentNotAStringOrParts),
        };
        if role == Role::Tool {
            match self.id {
                Found::Absent => return Err(MessageWrong::IdMissing),
                Found::Other => return Err(MessageWrong::IdNotAString),
                Found::Is(()) => {}
            }
        }
        Ok((estimate, assistant && self.reasoning))
    }
}

impl MessageWrong {
    /// The reference's error for the `i`th message, at `a..b` of `s`.
    #[cold]
    #[inline(never)]
    fn error(self, s: &[u8], (a, b): (usize, usize), i: usize) -> ApiError {
        let root = Param::root("messages");
        let p = root.index(i);
        let role_p = p.key("role");
        let tool_calls_p = p.key("tool_calls");
        let content_p = p.key("content");
        let id_p = p.key("tool_call_id");
        match self {
            MessageWrong::NotAnObject => ApiError::invalid_type(p.to_string(), "an object"),
            MessageWrong::Repeated => duplicate_in(&s[a..b], p),
            MessageWrong::RoleMissing => ApiError::missing(role_p.to_string()),
            MessageWrong::RoleNotAString => ApiError::invalid_type(role_p.to_string(), "a string"),
            MessageWrong::RoleUnknown => ApiError::invalid_value(
                role_p.to_string(),
                format!("'{role_p}' must be one of {}.", ROLES.join(", ")),
            ),
            MessageWrong::ToolCallsElsewhere => ApiError::invalid_value(
                tool_calls_p.to_string(),
                "Only assistant messages may carry 'tool_calls'.",
            ),
            MessageWrong::ToolCalls(e) => e,
            MessageWrong::ContentMissing => ApiError::missing(content_p.to_string()),
            MessageWrong::ContentEmpty => ApiError::invalid_value(
                content_p.to_string(),
                format!("'{content_p}' must not be an empty array."),
            ),
            MessageWrong::Part(j, wrong) => wrong.error(s, content_p.index(j)),
            MessageWrong::ContentNotAStringOrParts => ApiError::invalid_type(
                content_p.to_string(),
                "a string or an array of content parts",
            ),
            MessageWrong::IdMissing => ApiError::missing(id_p.to_string()),
            MessageWrong::IdNotAString => ApiError::invalid_type(id_p.to_string(), "a string"),
        }
    }
}

/// A message's members the rules read, by bit.
const ROLE: u8 = 1;
const CONTENT: u8 = 2;
const TOOL_CALLS: u8 = 4;
const TOOL_CALL_ID: u8 = 8;
const REASONING: u8 = 16;

#[inline(always)]
fn message_member(name: &[u8]) -> u8 {
    match name {
        b"role" => ROLE,
        b"content" => CONTENT,
        b"tool_calls" => TOOL_CALLS,
        b"tool_call_id" => TOOL_CALL_ID,
        b"reasoning_content" => REASONING,
        _ => 0,
    }
}

/// A string's text at the cursor (at its quote), unescaped when it has
/// escapes.
#[inline(always)]
fn text<'a>(c: &mut Cursor<'a>) -> Result<Cow<'a, [u8]>, Stop> {
    let open = c.at();
    let seen = c.string()?;
    let close = c.at() - 1;
    Ok(if seen & ESCAPED == 0 {
        Cow::Borrowed(&c.text()[open + 1..close])
    } else {
        c.name(Key {
            open,
            close,
            escaped: true,
        })
    })
}

/// `role`: a string naming a role (`Is(None)` for another string).
#[inline(always)]
fn read_role(c: &mut Cursor<'_>) -> Result<Found<Option<Role>>, Stop> {
    if c.text().get(c.at()) != Some(&b'"') {
        c.skip()?;
        return Ok(Found::Other);
    }
    Ok(Found::Is(match &*text(c)? {
        b"system" => Some(Role::System),
        b"user" => Some(Role::User),
        b"assistant" => Some(Role::Assistant),
        b"tool" => Some(Role::Tool),
        _ => None,
    }))
}

/// `content` at the cursor.
#[inline(always)]
fn read_content(c: &mut Cursor<'_>, keys: &mut KeySet) -> Result<Content, Stop> {
    let v = c.at();
    Ok(match c.text().get(v) {
        Some(b'"') => {
            c.string()?;
            Content::Text(c.at() - v)
        }
        Some(b'n') => {
            c.skip()?;
            Content::Null
        }
        Some(b'[') => Content::Parts(read_parts(c, keys)?),
        _ => {
            c.skip()?;
            Content::Other
        }
    })
}

/// Content parts at the cursor (at `[`).
#[inline(never)]
fn read_parts(c: &mut Cursor<'_>, keys: &mut KeySet) -> Result<Parts, Stop> {
    let mut parts = Parts::default();
    c.elements(|c| {
        let j = parts.count;
        parts.count += 1;
        let part = read_part(c, keys)?;
        let (for_user, for_others) = (part.judge(true), part.judge(false));
        match for_user {
            Ok(estimate) => parts.estimate += estimate,
            Err(wrong) => {
                parts.wrong_for_user.get_or_insert((j, wrong));
            }
        }
        if let Err(wrong) = for_others {
            parts.wrong_for_others.get_or_insert((j, wrong));
        }
        Ok(())
    })?;
    Ok(parts)
}

/// A content part's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartType {
    Text,
    Image,
    Unknown,
}

/// A content part as far as the rules need it.
#[derive(Debug, Clone, Copy)]
struct Part {
    /// Its range, when an object.
    object: Option<(usize, usize)>,
    repeated: bool,
    ty: Found<PartType>,
    /// `text`: its raw length.
    text: Found<usize>,
    image_url: Found<ImageUrl>,
}

/// A part's `image_url` object.
#[derive(Debug, Clone, Copy)]
struct ImageUrl {
    range: (usize, usize),
    repeated: bool,
    /// `url`: whether it is an acceptable one.
    url: Found<bool>,
}

impl Part {
    /// Its estimate, or what is wrong with it, in a user message (`user`) or
    /// any other.
    fn judge(&self, user: bool) -> Result<u64, Wrong> {
        let Some((a, b)) = self.object else {
            return Err(Wrong::NotAnObject);
        };
        if self.repeated {
            return Err(Wrong::Repeated(a, b));
        }
        match self.ty {
            Found::Absent => Err(Wrong::TypeMissing),
            Found::Other => Err(Wrong::TypeNotAString),
            Found::Is(PartType::Text) => match self.text {
                Found::Absent => Err(Wrong::TextMissing),
                Found::Other => Err(Wrong::TextNotAString),
                Found::Is(len) => Ok((len as u64).saturating_sub(2).div_ceil(4)),
            },
            Found::Is(PartType::Image) if user => match self.image_url {
                Found::Absent => Err(Wrong::ImageUrlMissing),
                Found::Other => Err(Wrong::ImageUrlNotAnObject),
                Found::Is(image) if image.repeated => {
                    Err(Wrong::ImageUrlRepeated(image.range.0, image.range.1))
                }
                Found::Is(image) => match image.url {
                    Found::Absent => Err(Wrong::UrlMissing),
                    Found::Other => Err(Wrong::UrlNotAString),
                    Found::Is(false) => Err(Wrong::UrlInvalid),
                    Found::Is(true) => Ok(IMAGE_TOKEN_ESTIMATE),
                },
            },
            Found::Is(PartType::Image) => Err(Wrong::ImageElsewhere),
            Found::Is(PartType::Unknown) => Err(Wrong::TypeUnknown),
        }
    }
}

impl Wrong {
    /// The reference's error (`p` is the part's path).
    #[cold]
    fn error(self, s: &[u8], p: Param<'_>) -> ApiError {
        let type_p = p.key("type");
        let text_p = p.key("text");
        let image_p = p.key("image_url");
        let url_p = image_p.key("url");
        match self {
            Wrong::NotAnObject => ApiError::invalid_type(p.to_string(), "an object"),
            Wrong::Repeated(a, b) => duplicate_in(&s[a..b], p),
            Wrong::TypeMissing => ApiError::missing(type_p.to_string()),
            Wrong::TypeNotAString => ApiError::invalid_type(type_p.to_string(), "a string"),
            Wrong::TypeUnknown => ApiError::invalid_value(
                type_p.to_string(),
                format!("'{type_p}' must be 'text' or 'image_url'."),
            ),
            Wrong::TextMissing => ApiError::missing(text_p.to_string()),
            Wrong::TextNotAString => ApiError::invalid_type(text_p.to_string(), "a string"),
            Wrong::ImageElsewhere => ApiError::invalid_value(
                type_p.to_string(),
                "Image parts are only allowed in user messages.",
            ),
            Wrong::ImageUrlMissing => ApiError::missing(image_p.to_string()),
            Wrong::ImageUrlNotAnObject => ApiError::invalid_type(image_p.to_string(), "an object"),
            Wrong::ImageUrlRepeated(a, b) => duplicate_in(&s[a..b], image_p),
            Wrong::UrlMissing => ApiError::missing(url_p.to_string()),
            Wrong::UrlNotAString => ApiError::invalid_type(url_p.to_string(), "a string"),
            Wrong::UrlInvalid => ApiError::invalid_value(
                url_p.to_string(),
                "An image URL must be http(s):// or a data:image/...;base64,... URI.",
            ),
        }
    }
}

/// A content part at the cursor.
fn read_part(c: &mut Cursor<'_>, keys: &mut KeySet) -> Result<Part, Stop> {
    let start = c.at();
    let mut part = Part {
        object: None,
        repeated: false,
        ty: Found::Absent,
        text: Found::Absent,
        image_url: Found::Absent,
    };
    if c.text().get(start) != Some(&b'{') {
        c.skip()?;
        return Ok(part);
    }
    let base = keys.len();
    let mut seen = 0u8;
    c.members(Keys::Skipped, |c, key| {
        let v = c.at();
        let bit = match &*c.name(key) {
            b"type" => {
                part.ty = if c.text().get(v) == Some(&b'"') {
                    Found::Is(match &*text(c)? {
                        b"text" => PartType::Text,
                        b"image_url" => PartType::Image,
                        _ => PartType::Unknown,
                    })
                } else {
                    c.skip()?;
                    Found::Other
                };
                1
            }
            b"text" => {
                c.skip()?;
                part.text = if c.text().get(v) == Some(&b'"') {
                    Found::Is(c.at() - v)
                } else {
                    Found::Other
                };
                2
            }
            b"image_url" => {
                part.image_url = read_image_url(c, keys)?;
                4
            }
            _ => {
                keys.push(key);
                c.skip()?;
                0
            }
        };
        part.repeated |= seen & bit != 0;
        seen |= bit;
        Ok(())
    })?;
    part.repeated |= keys.repeats(c, base);
    keys.truncate(base);
    part.object = Some((start, c.at()));
    Ok(part)
}

/// A part's `image_url` at the cursor.
fn read_image_url(c: &mut Cursor<'_>, keys: &mut KeySet) -> Result<Found<ImageUrl>, Stop> {
    let start = c.at();
    if c.text().get(start) != Some(&b'{') {
        c.skip()?;
        return Ok(Found::Other);
    }
    let base = keys.len();
    let mut url = Found::Absent;
    let mut repeated = false;
    c.members(Keys::Skipped, |c, key| {
        if &*c.name(key) != b"url" {
            keys.push(key);
            return c.skip();
        }
        repeated |= url != Found::Absent;
        url = if c.text().get(c.at()) == Some(&b'"') {
            Found::Is(image_url_ok(&text(c)?))
        } else {
            c.skip()?;
            Found::Other
        };
        Ok(())
    })?;
    repeated |= keys.repeats(c, base);
    keys.truncate(base);
    Ok(Found::Is(ImageUrl {
        range: (start, c.at()),
        repeated,
        url,
    }))
}

/// An image URL is `http(s)://…` or `data:image/<type>;base64,<data>`.
fn image_url_ok(url: &[u8]) -> bool {
    if url.starts_with(b"https://") || url.starts_with(b"http://") {
        return true;
    }
    let Some(rest) = url.strip_prefix(b"data:") else {
        return false;
    };
    let Some(comma) = rest.iter().position(|&b| b == b',') else {
        return false;
    };
    let (meta, data) = (&rest[..comma], &rest[comma + 1..]);
    let mut params = meta.split(|&b| b == b';');
    let mime = params.next().unwrap_or_default();
    let is_base64 = params.any(|p| p.eq_ignore_ascii_case(b"base64"));
    let mime_ok = mime.len() > 6 && mime[..6].eq_ignore_ascii_case(b"image/");
    mime_ok
        && is_base64
        && !data.is_empty()
        && data.iter().all(|&b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'+' | b'/' | b'=' | b'-' | b'_' | b'\r' | b'\n')
        })
}

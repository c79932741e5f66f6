//! A headless Chromium driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`, installed by the test command), for the tests of the
//! console and of single sign-on.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::wait::PATIENCE;

/// A chromedriver process and one headless Chromium session.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Never a panic here (it may run while a failed test unwinds):
        // close the session if chromedriver answers, then end chromedriver
        // and the browsers it started (its own process group).
        let _ = webdriver(
            self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        kill_group(&mut self.driver);
    }
}

pub(crate) fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) on the process group this test created.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.wait();
}

/// One WebDriver command: its JSON answer (status, body), or why none came.
pub(crate) fn webdriver(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut s = TcpStream::connect(addr).map_err(|e| format!("chromedriver: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    // chromedriver refuses a Host that is not local.
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        addr.port(),
        body.len()
    );
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body.as_bytes()))
        .map_err(|e| format!("chromedriver: {e}"))?;
    // Read until the answer is whole (chromedriver may keep the connection).
    let mut raw = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("chromedriver: {e}"))?;
        raw.extend_from_slice(&chunk[..n]);
        let parsed = chatgate_testkit::parse_response(&raw, n == 0)
            .map_err(|e| format!("chromedriver's answer: {e:?}"))?;
        if let Some((r, _)) = parsed
            && (r.complete || n == 0)
        {
            return Ok((
                r.status,
                serde_json::from_slice(&r.body).unwrap_or(Value::Null),
            ));
        }
        if n == 0 {
            return Err("chromedriver closed mid-answer".into());
        }
    }
}

impl Browser {
    /// chromedriver on a free port and a session; tried again on another
    /// port if that one was taken meanwhile.
    pub fn start() -> Browser {
        Browser::start_with(&[])
    }

    /// The same, with more Chromium flags (e.g. the certificate a test
    /// server presents: `--ignore-certificate-errors-spki-list=…`).
    pub fn start_with(flags: &[String]) -> Browser {
        let mut why = String::new();
        for _ in 0..3 {
            match Browser::try_start(flags) {
                Ok(b) => return b,
                Err(e) => why = e,
            }
        }
        panic!("no WebDriver session: {why}");
    }

    pub fn try_start(flags: &[String]) -> Result<Browser, String> {
        use std::os::unix::process::CommandExt as _;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/test.sh installs it)");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            match webdriver(addr, "GET", "/status", None) {
                Ok((200, v)) if v["value"]["ready"] == true => break Ok(()),
                Ok((s, v)) if Instant::now() >= deadline => break Err(format!("{s} {v}")),
                Err(e) if Instant::now() >= deadline => break Err(e),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        if let Err(e) = status {
            kill_group(&mut driver);
            return Err(format!("chromedriver did not start: {e}"));
        }
        let profile = tempfile::tempdir().unwrap();
        let args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .chain(flags.iter().cloned())
        .collect();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium(),
                "args": args,
            },
        }}});
        let session = match webdriver(addr, "POST", "/session", Some(&caps)) {
            Ok((200, v)) => v["value"]["sessionId"].as_str().unwrap().to_owned(),
            other => {
                kill_group(&mut driver);
                return Err(format!("new session: {other:?}"));
            }
        };
        Ok(Browser {
            driver,
            addr,
            session,
            _profile: profile,
        })
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        self.try_call(method, path, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn try_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        match webdriver(self.addr, method, path, body)? {
            (200, v) => Ok(v["value"].clone()),
            (status, v) => Err(format!("{status} {v}")),
        }
    }

    pub fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        self.call(
            method,
            &format!("/session/{}{what}", self.session),
            body.as_ref(),
        )
    }

    /// The cookie named `name` as WebDriver describes it (`secure`,
    /// `httpOnly`, …); panics if the browser has none.
    pub fn cookie(&self, name: &str) -> Value {
        let cookies = self.cmd("GET", "/cookie", None);
        cookies
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("no cookie {name}: {cookies}"))
            .clone()
    }

    pub fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Waits until `script` returns something truthy; returns it.
    pub fn until(&self, what: &str, within: Duration, script: &str) -> Value {
        self.until_by(what, Instant::now() + within, script)
    }

    /// The same, by `deadline`. A script that fails (the document is
    /// being replaced, say) is not there yet.
    pub fn until_by(&self, what: &str, deadline: Instant, script: &str) -> Value {
        loop {
            let body = json!({ "script": script, "args": [] });
            let path = format!("/session/{}/execute/sync", self.session);
            let last = match self.try_call("POST", &path, Some(&body)) {
                Ok(v) if !(v.is_null() || v == false || v == "" || v == json!([])) => return v,
                Ok(v) => v,
                Err(e) => Value::String(e),
            };
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} (last: {last})"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Presses keys on the focused element (WebDriver key codes).
    pub fn keys(&self, keys: &[&str]) {
        let actions: Vec<Value> = keys
            .iter()
            .flat_map(|k| {
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        self.cmd(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        );
    }

    /// The browser's console entries since the last call.
    pub fn log(&self) -> Vec<Value> {
        self.cmd("POST", "/se/log", Some(json!({"type": "browser"})))
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A screenshot of the window, or of the element `css` selects.
    pub fn screenshot_of(&self, css: Option<&str>, path: &Path) {
        let what = match css {
            None => "/screenshot".to_owned(),
            Some(css) => {
                let e = self.cmd(
                    "POST",
                    "/element",
                    Some(json!({"using": "css selector", "value": css})),
                );
                let id = e["element-6066-11e4-a52e-4f735466cecf"].as_str().unwrap();
                format!("/element/{id}/screenshot")
            }
        };
        let b64 = self.cmd("GET", &what, None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(
                b64.as_str()
                    .unwrap_or_else(|| panic!("a screenshot: {b64}")),
            )
            .expect("a PNG");
        std::fs::write(path, png).unwrap();
    }
}

pub const ENTER: &str = "\u{E007}";
pub const TAB: &str = "\u{E004}";
pub const ESCAPE: &str = "\u{E00C}";

pub(crate) fn chromium() -> String {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("chromium")
        .to_owned()
}

/// Clicks the element `css` selects (it must be there).
pub fn click(browser: &Browser, css: &str) {
    let found = browser.js(&format!(
        "const e = document.querySelector({css:?}); if (!e) return false; e.click(); return true;"
    ));
    assert_eq!(found, true, "nothing to click at {css}");
}

/// Types `value` into the input `css` selects, as a user would (the
/// page hears its `input` event).
pub fn fill(browser: &Browser, css: &str, value: &str) {
    browser.js(&format!(
        "const e = document.querySelector({css:?}); e.value = {value:?}; \
         e.dispatchEvent(new Event('input', {{ bubbles: true }})); return true;"
    ));
}

/// The text of the first element `css` selects, once it has some.
pub fn text_of(browser: &Browser, what: &str, css: &str) -> String {
    browser
        .until(
            what,
            PATIENCE,
            &format!(
                "const e = document.querySelector({css:?}); return e && (e.value || e.textContent)"
            ),
        )
        .as_str()
        .unwrap()
        .to_owned()
}

pub fn dialog_open(browser: &Browser, id: &str) {
    browser.until(
        &format!("the dialog {id}"),
        PATIENCE,
        &format!("return document.getElementById('{id}').open"),
    );
}

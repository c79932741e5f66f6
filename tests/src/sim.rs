//! The simulator: `sim` started as a child, its journal and its runtime
//! fault.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http::request;
use crate::process::{Proc, address_from};
use crate::wait::PATIENCE;

/// A running simulator.
pub struct Sim {
    /// The process.
    pub proc: Proc,
    /// Its address.
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Sim {
    /// Starts `bin sim --listen 127.0.0.1:0 args…`.
    pub fn start(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Sim {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut all = vec!["sim".to_owned(), "--listen".into(), "127.0.0.1:0".into()];
        all.extend(args.iter().map(|s| s.to_string()));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut proc = Proc::spawn(bin, &all, &env, &dir.path().join("sim.stderr"));
        let addr = address_from(&proc.line());
        Sim {
            proc,
            addr,
            _dir: dir,
        }
    }

    /// `http://addr/v1`
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The journal: one object per chat request received.
    pub fn journal(&self) -> Vec<Value> {
        let r = request(self.addr, "GET", "/_sim/journal", None, None);
        assert_eq!(r.status, 200);
        serde_json::from_slice::<Vec<Value>>(&r.body).expect("journal JSON")
    }

    /// Sets the fault for every request that chooses none
    /// (`POST /_sim/fault`), e.g. `{"fault":"reject","status":503}`.
    pub fn set_fault(&self, fault: &str) {
        let r = request(self.addr, "POST", "/_sim/fault", None, Some(fault));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }

    /// Clears the fault set with [`Sim::set_fault`].
    pub fn clear_fault(&self) {
        assert_eq!(
            request(self.addr, "DELETE", "/_sim/fault", None, None).status,
            200
        );
    }

    /// Waits until the journal entry `i` has left `in_progress`.
    pub fn settled(&self, i: usize) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let j = self.journal();
            if let Some(e) = j.get(i)
                && e["outcome"] != "in_progress"
            {
                return e.clone();
            }
            assert!(
                Instant::now() < deadline,
                "journal entry {i} did not settle: {j:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

//! Serving: the accept loops and the shutdown sequence (`listener`), the
//! per-connection loop that obeys core's `Connection` — the only place
//! bytes move between client, provider and ledger (`driver`), the admin
//! listener (`admin`), the background runs of the Responses API and
//! their followers (`runs`), the console's figures of every instance (`cluster`),
//! single sign-on's requests to the identity
//! provider (`sso`), and the simulator's server (`sim`).

pub(crate) mod admin;
pub(crate) mod cluster;
pub(crate) mod driver;
pub(crate) mod listener;
pub(crate) mod runs;
pub(crate) mod sim;
pub(crate) mod sso;

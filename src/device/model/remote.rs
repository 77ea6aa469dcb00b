//! [`RemoteModel`]: a capacity tier on another machine (a round trip per
//! request, the server's service time, and the link's bandwidth each way).

use std::time::Duration;

use serde::Serialize;

use super::{secs, OpKind, TimingModel};

/// Parameters of a remote capacity tier (an NBD export, a RADOS pool).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RemoteParams {
    /// Model name.
    pub name: &'static str,
    /// Network round trip, seconds.
    pub rtt: f64,
    /// The server's time per request once it arrives, seconds (requests
    /// overlap there without limit).
    pub service: f64,
    /// Bandwidth of the link each way, bytes/s.
    pub bandwidth: f64,
}

impl RemoteParams {
    /// A network disk 1 ms away (round trip) on 10 Gbit/s, served from
    /// flash or cache at the far end (0.1 ms per request).
    pub const REMOTE_1MS: RemoteParams = RemoteParams {
        name: "remote-1ms",
        rtt: 0.001,
        service: 0.0001,
        bandwidth: 1.25e9,
    };
}

/// A capacity tier reached over a network.
pub struct RemoteModel {
    p: RemoteParams,
    /// When the link towards the server is free again.
    up: Duration,
    /// When the link back is free again.
    down: Duration,
}

impl RemoteModel {
    /// A remote with parameters `p`.
    pub fn new(p: RemoteParams) -> Self {
        RemoteModel {
            p,
            up: Duration::ZERO,
            down: Duration::ZERO,
        }
    }
}

impl TimingModel for RemoteModel {
    fn submit(&mut self, kind: OpKind, _offset: u64, len: u64, now: Duration) -> Duration {
        let half = secs(self.p.rtt / 2.0);
        let service = secs(self.p.service);
        let wire = secs(len as f64 / self.p.bandwidth);
        match kind {
            OpKind::Read => {
                let ready = now + half + service;
                self.down = self.down.max(ready) + wire;
                self.down + half
            }
            OpKind::Write => {
                self.up = self.up.max(now) + wire;
                self.up + half + service + half
            }
            OpKind::Flush => now + half + service + half,
        }
    }

    fn name(&self) -> &'static str {
        self.p.name
    }

    fn remote(&self) -> bool {
        true
    }
}

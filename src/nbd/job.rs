//! What a connection's thread takes off the stream to serve ([`Job`]):
//! a reply ready at once, a READ, a WRITE with its payload in the thread's
//! buffer, or another command, each with the budget bytes it holds; and a
//! READ queued for the slow lane turned back into one.

use super::lanes::Parked;
use super::request::Op;
use crate::units::IoHint;

/// What a thread took off the stream. `cost`: the budget bytes it holds.
pub(super) enum Job {
    /// Answer at once with this encoded reply.
    Reply(Vec<u8>),
    /// Read `len` bytes into the thread's buffer and send them.
    Read {
        cookie: u64,
        offset: u64,
        len: u32,
        hint: IoHint,
        cost: usize,
    },
    /// Write the payload now at the start of the thread's buffer.
    Write {
        cookie: u64,
        offset: u64,
        len: u32,
        fua: bool,
        hint: IoHint,
        cost: usize,
    },
    /// Any other op.
    Other { op: Op, cookie: u64, cost: usize },
}

impl Job {
    /// The budget bytes it holds.
    pub(super) fn cost(&self) -> usize {
        match self {
            Job::Reply(_) => 0,
            Job::Read { cost, .. } | Job::Write { cost, .. } | Job::Other { cost, .. } => *cost,
        }
    }
}

impl Job {
    /// A READ as the slow lane queues it.
    pub(super) fn parked(&self) -> Option<Parked> {
        match *self {
            Job::Read {
                cookie,
                offset,
                len,
                hint,
                cost,
            } => Some(Parked {
                cookie,
                offset,
                len,
                hint,
                cost,
            }),
            _ => None,
        }
    }
}

impl Parked {
    /// The READ to serve.
    pub(super) fn job(self) -> Job {
        let Parked {
            cookie,
            offset,
            len,
            hint,
            cost,
        } = self;
        Job::Read {
            cookie,
            offset,
            len,
            hint,
            cost,
        }
    }
}

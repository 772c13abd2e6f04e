//! A run's recent events, bounded by count and by bytes.
//!
//! The ring holds the `run/event` notifications of one run in `seq` order,
//! each shared (`Arc`) with the connection buffers it was pushed to, so a
//! replay copies pointers, not events. When it holds more than
//! `max_events` notifications or more than `max_bytes` of their serialized
//! size, the oldest go — but never the newest one, so a subscriber can
//! always join the live tail. What was evicted is remembered as a number
//! (`evicted_through`), which is what makes `events_lagged` exact: a
//! subscriber asking for a `seq` at or below it is told so instead of
//! silently missing events.
//!
//! Invariant: the notifications held are consecutive in `seq`, and every
//! `seq` below the oldest held was evicted (none was skipped).

use std::collections::VecDeque;
use std::sync::Arc;

use keel_protocol::rpc::Notification;

/// One run's event ring.
pub(crate) struct Ring {
    held: VecDeque<Held>,
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
    /// The highest `seq` evicted, if any was.
    evicted_through: Option<u64>,
    /// The `seq` the next event will have.
    next_seq: u64,
}

struct Held {
    seq: u64,
    note: Arc<Notification>,
    bytes: usize,
}

/// A replay asked for events the ring no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lagged {
    /// The oldest `seq` the ring holds.
    pub(crate) oldest_seq: Option<u64>,
}

impl Ring {
    /// An empty ring with these bounds (each at least one event or byte).
    pub(crate) fn new(max_events: usize, max_bytes: usize) -> Self {
        Self {
            held: VecDeque::new(),
            bytes: 0,
            max_events: max_events.max(1),
            max_bytes: max_bytes.max(1),
            evicted_through: None,
            next_seq: 0,
        }
    }

    /// Adds the notification of event `seq` (`bytes`: its serialized size)
    /// and evicts the oldest beyond the bounds.
    pub(crate) fn push(&mut self, seq: u64, note: Arc<Notification>, bytes: usize) {
        self.held.push_back(Held { seq, note, bytes });
        self.bytes += bytes;
        self.next_seq = seq + 1;
        while self.held.len() > 1
            && (self.held.len() > self.max_events || self.bytes > self.max_bytes)
        {
            if let Some(old) = self.held.pop_front() {
                self.bytes -= old.bytes;
                self.evicted_through = Some(old.seq);
            }
        }
    }

    /// The notifications after `after` (all of them for `None`), oldest
    /// first; [`Lagged`] when some of those were evicted.
    pub(crate) fn after(
        &self,
        after: Option<u64>,
    ) -> Result<impl Iterator<Item = &Arc<Notification>>, Lagged> {
        if let Some(evicted) = self.evicted_through
            && after.is_none_or(|after| after < evicted)
        {
            return Err(Lagged {
                oldest_seq: self.oldest_seq(),
            });
        }
        Ok(self
            .held
            .iter()
            .filter(move |held| after.is_none_or(|after| held.seq > after))
            .map(|held| &held.note))
    }

    /// The oldest `seq` held.
    pub(crate) fn oldest_seq(&self) -> Option<u64> {
        self.held.front().map(|held| held.seq)
    }

    /// The `seq` the next event will have.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(seq: u64) -> Arc<Notification> {
        Arc::new(Notification::new(
            "run/event",
            serde_json::json!({ "seq": seq }),
        ))
    }

    fn seqs<'a>(notes: impl Iterator<Item = &'a Arc<Notification>>) -> Vec<u64> {
        notes
            .filter_map(|note| note.params.get("seq")?.as_u64())
            .collect()
    }

    #[test]
    fn evicts_by_count_and_by_bytes_and_says_what_it_lost() {
        let mut ring = Ring::new(3, 1000);
        for seq in 0..5 {
            ring.push(seq, note(seq), 10);
        }
        assert_eq!(ring.oldest_seq(), Some(2));
        assert_eq!(
            ring.after(Some(0)).err(),
            Some(Lagged {
                oldest_seq: Some(2)
            })
        );
        assert!(ring.after(None).is_err());
        assert_eq!(
            seqs(ring.after(Some(1)).unwrap_or_else(|_| panic!("held"))),
            vec![2, 3, 4]
        );
        assert_eq!(
            seqs(ring.after(Some(3)).unwrap_or_else(|_| panic!("held"))),
            vec![4]
        );

        let mut ring = Ring::new(100, 25);
        for seq in 0..4 {
            ring.push(seq, note(seq), 10);
        }
        assert_eq!(ring.oldest_seq(), Some(2));
        // One event larger than the bound is still held: the live tail.
        ring.push(4, note(4), 500);
        assert_eq!(ring.oldest_seq(), Some(4));
        assert_eq!(ring.next_seq(), 5);
    }
}

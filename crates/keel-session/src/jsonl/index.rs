//! The in-memory index of one session file: where each entry is, not what
//! it says.
//!
//! Opening a session keeps only ids, parents (as positions), file offsets and
//! the few facts `list` and the context projection need, so memory grows with
//! the number of entries, never with their size. Payloads are read back from
//! the file by offset when a branch is built.

use std::collections::HashMap;

use keel_protocol::{Entry, EntryPayload, Message, TimestampMs};

/// Where one entry's line is, and how it hangs in the tree.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) id: String,
    pub(crate) parent: Option<usize>,
    pub(crate) offset: u64,
    pub(crate) len: u32,
    /// For a checkpoint, the entry its summary is followed by.
    pub(crate) first_kept: Option<String>,
}

/// The tree of one session, by position.
#[derive(Debug, Default, Clone)]
pub(crate) struct Index {
    pub(crate) slots: Vec<Slot>,
    by_id: HashMap<String, usize>,
    pub(crate) leaf: Option<usize>,
    pub(crate) title: Option<String>,
    pub(crate) last_activity: TimestampMs,
}

/// Why an entry or leaf move does not fit the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TreeFault {
    Duplicate(String),
    SecondRoot(String),
    MissingParent { entry_id: String, parent_id: String },
    UnknownLeaf(String),
}

impl Index {
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Checks that `entry` can be added (its id unused, its parent present).
    pub(crate) fn check_entry(&self, entry: &Entry, pending: &[&str]) -> Result<(), TreeFault> {
        if self.contains(&entry.id) || pending.contains(&entry.id.as_str()) {
            return Err(TreeFault::Duplicate(entry.id.clone()));
        }
        match &entry.parent_id {
            None if self.slots.is_empty() && pending.is_empty() => Ok(()),
            None => Err(TreeFault::SecondRoot(entry.id.clone())),
            Some(parent) if self.contains(parent) || pending.contains(&parent.as_str()) => Ok(()),
            Some(parent) => Err(TreeFault::MissingParent {
                entry_id: entry.id.clone(),
                parent_id: parent.clone(),
            }),
        }
    }

    /// Adds a checked entry whose line is at `offset..offset+len`; the leaf
    /// moves to it.
    pub(crate) fn push(&mut self, entry: &Entry, offset: u64, len: u32) -> Result<(), TreeFault> {
        self.check_entry(entry, &[])?;
        let parent = entry.parent_id.as_deref().and_then(|id| self.position(id));
        let first_kept = match &entry.payload {
            EntryPayload::Checkpoint {
                first_kept_entry_id,
                ..
            } => Some(first_kept_entry_id.clone()),
            _ => None,
        };
        if self.title.is_none()
            && let EntryPayload::Message {
                message: Message::User(user),
            } = &entry.payload
        {
            self.title = Some(user.plain_text().chars().take(80).collect());
        }
        self.last_activity = self.last_activity.max(entry.timestamp);
        let position = self.slots.len();
        self.by_id.insert(entry.id.clone(), position);
        self.slots.push(Slot {
            id: entry.id.clone(),
            parent,
            offset,
            len,
            first_kept,
        });
        self.leaf = Some(position);
        Ok(())
    }

    /// Moves the leaf to an existing entry.
    pub(crate) fn move_leaf(&mut self, id: &str) -> Result<(), TreeFault> {
        let position = self
            .position(id)
            .ok_or_else(|| TreeFault::UnknownLeaf(id.to_owned()))?;
        self.leaf = Some(position);
        Ok(())
    }

    /// Positions from the root to `tip`, inclusive.
    pub(crate) fn path_to(&self, tip: Option<usize>) -> Vec<usize> {
        let mut path = Vec::new();
        let mut cursor = tip;
        while let Some(position) = cursor {
            path.push(position);
            cursor = self.slots.get(position).and_then(|slot| slot.parent);
        }
        path.reverse();
        path
    }

    /// The part of the active branch a model request needs: from the latest
    /// checkpoint's first kept entry (or the root) to the leaf, with the
    /// checkpoint itself kept so its summary can stand in for the rest.
    pub(crate) fn context_path(&self) -> Vec<usize> {
        let path = self.path_to(self.leaf);
        let Some(checkpoint_at) = path.iter().rposition(|&position| {
            self.slots
                .get(position)
                .is_some_and(|slot| slot.first_kept.is_some())
        }) else {
            return path;
        };
        let first_kept = path
            .get(checkpoint_at)
            .and_then(|&position| self.slots.get(position))
            .and_then(|slot| slot.first_kept.as_deref());
        let start = first_kept
            .and_then(|id| {
                path.iter().position(|&position| {
                    self.slots.get(position).is_some_and(|slot| slot.id == id)
                })
            })
            .unwrap_or(checkpoint_at)
            .min(checkpoint_at);
        path.get(start..).map(<[usize]>::to_vec).unwrap_or_default()
    }
}

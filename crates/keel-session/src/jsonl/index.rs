//! The in-memory index of one session file: where each entry is, not what
//! it says.
//!
//! Opening a session keeps only ids, parents (as positions), file offsets and
//! the few facts `list` and the context projection need, so memory grows with
//! the number of entries, never with their size. Payloads are read back from
//! the file by offset when a branch is built.

use std::collections::HashMap;

use keel_protocol::TimestampMs;

use super::format::Slotted;

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

    /// Checks that an entry `id` under `parent` can be added (its id unused,
    /// its parent present); `pending` are ids about to be added before it.
    pub(crate) fn check(
        &self,
        id: &str,
        parent: Option<&str>,
        pending: &[&str],
    ) -> Result<(), TreeFault> {
        if self.contains(id) || pending.contains(&id) {
            return Err(TreeFault::Duplicate(id.to_owned()));
        }
        match parent {
            None if self.slots.is_empty() && pending.is_empty() => Ok(()),
            None => Err(TreeFault::SecondRoot(id.to_owned())),
            Some(parent) if self.contains(parent) || pending.contains(&parent) => Ok(()),
            Some(parent) => Err(TreeFault::MissingParent {
                entry_id: id.to_owned(),
                parent_id: parent.to_owned(),
            }),
        }
    }

    /// Adds a checked entry whose line is at `offset..offset+len`; the leaf
    /// moves to it.
    pub(crate) fn push(&mut self, entry: Slotted, offset: u64, len: u32) -> Result<(), TreeFault> {
        self.check(&entry.id, entry.parent_id.as_deref(), &[])?;
        let parent = entry.parent_id.as_deref().and_then(|id| self.position(id));
        if self.title.is_none()
            && let Some(text) = &entry.user_text
        {
            self.title = crate::title_of(text);
        }
        self.last_activity = self.last_activity.max(entry.timestamp);
        let position = self.slots.len();
        self.by_id.insert(entry.id.clone(), position);
        self.slots.push(Slot {
            id: entry.id,
            parent,
            offset,
            len,
            first_kept: entry.first_kept,
        });
        self.leaf = Some(position);
        Ok(())
    }

    /// Whether the index still wants a title (no user message seen yet).
    pub(crate) fn wants_title(&self) -> bool {
        self.title.is_none()
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
    /// Parents always precede their children here, so the walk cannot fail;
    /// an empty path stands for an unknown tip.
    pub(crate) fn path_to(&self, tip: Option<usize>) -> Vec<usize> {
        tip.and_then(|tip| {
            crate::path_from_root(tip, self.slots.len(), |position| {
                self.slots.get(position).map(|slot| slot.parent)
            })
        })
        .unwrap_or_default()
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

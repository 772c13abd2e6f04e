//! Appends a run's entries to its session as one linear chain.
//!
//! Concurrent tool calls may record decisions at the same time; the writer
//! serialises appends so that each group's first entry names the previous
//! group's last entry as its parent, and reports every stored entry as a
//! `session_entry` event only after the store acknowledged it.

use std::sync::Arc;

use keel_protocol::{Entry, EntryPayload, RunEventKind};
use keel_session::{SessionError, SessionStore};
use tokio::sync::Mutex;

use crate::emitter::{Emitter, now_ms};
use crate::run::new_id;

pub(crate) struct SessionWriter {
    store: Arc<dyn SessionStore>,
    session_id: String,
    leaf: Mutex<Option<String>>,
}

impl SessionWriter {
    pub(crate) async fn open(
        store: Arc<dyn SessionStore>,
        session_id: String,
    ) -> Result<Self, SessionError> {
        let leaf = store.leaf(&session_id).await?;
        Ok(Self {
            store,
            session_id,
            leaf: Mutex::new(leaf),
        })
    }

    /// The part of the branch a model request needs (from the latest checkpoint).
    pub(crate) async fn context_branch(&self) -> Result<Vec<Entry>, SessionError> {
        self.store.context_branch(&self.session_id).await
    }

    /// Appends `payloads` atomically as a chain below the current leaf.
    pub(crate) async fn append(
        &self,
        emitter: &Emitter,
        payloads: Vec<EntryPayload>,
    ) -> Result<Vec<Entry>, SessionError> {
        let mut leaf = self.leaf.lock().await;
        let mut parent = leaf.clone();
        let timestamp = now_ms();
        let entries: Vec<Entry> = payloads
            .into_iter()
            .map(|payload| {
                let id = new_id();
                Entry {
                    id: id.clone(),
                    parent_id: parent.replace(id),
                    timestamp,
                    payload,
                }
            })
            .collect();
        self.store.append(&self.session_id, entries.clone()).await?;
        *leaf = parent;
        for entry in &entries {
            emitter.emit(RunEventKind::SessionEntry {
                entry_id: entry.id.clone(),
                parent_id: entry.parent_id.clone(),
                kind: entry.kind().to_owned(),
            });
        }
        Ok(entries)
    }
}

//! Appends a run's entries to its session as one linear chain.
//!
//! Concurrent tool calls may record decisions at the same time; the writer
//! serialises appends so that each group's first entry names the previous
//! group's last entry as its parent, and reports every stored entry as a
//! `session_entry` event only after the store acknowledged it.
//!
//! The writer also keeps the run's context branch in memory: it is read from
//! the store once, when the run opens the session, and extended with every
//! acknowledged append, so building a request never re-reads the session.
//! This holds because a run is its session's only writer while it runs.

use std::sync::Arc;

use keel_protocol::{Entry, EntryPayload, Message, RunEventKind};
use keel_session::{SessionError, SessionStore};
use tokio::sync::Mutex;

use crate::emitter::Emitter;
use crate::ids::{new_id, now_ms};
use crate::rules::SessionRules;

/// See [`SessionWriter::context_summary`].
pub(crate) struct ContextSummary {
    pub(crate) leaf_id: Option<String>,
    pub(crate) length: usize,
    pub(crate) configuration: Option<EntryPayload>,
}

pub(crate) struct SessionWriter {
    store: Arc<dyn SessionStore>,
    session_id: String,
    /// The leaf and the context branch that ends at it.
    state: Mutex<(Option<String>, Vec<Entry>)>,
}

impl SessionWriter {
    pub(crate) async fn open(
        store: Arc<dyn SessionStore>,
        session_id: String,
    ) -> Result<Self, SessionError> {
        let leaf = store.leaf(&session_id).await?;
        let context = store.context_branch(&session_id).await?;
        Ok(Self {
            store,
            session_id,
            state: Mutex::new((leaf, context)),
        })
    }

    /// What a resumed run needs of the context branch (the part a model
    /// request needs, from the latest checkpoint): its last entry's id, its
    /// length and its latest configuration — without copying the branch.
    pub(crate) async fn context_summary(&self) -> ContextSummary {
        let state = self.state.lock().await;
        ContextSummary {
            leaf_id: state.1.last().map(|entry| entry.id.clone()),
            length: state.1.len(),
            configuration: crate::context::last_configuration(&state.1).cloned(),
        }
    }

    /// The session rules recorded on the context branch.
    pub(crate) async fn rules(&self) -> SessionRules {
        SessionRules::from_branch(&self.state.lock().await.1)
    }

    /// The messages of the context branch for a request, projected without
    /// first copying the branch.
    pub(crate) async fn project_context(&self) -> Vec<Message> {
        crate::context::project(&self.state.lock().await.1)
    }

    /// Runs `read` on the context branch (the active branch from the latest
    /// checkpoint's first kept entry), under the writer's lock.
    pub(crate) async fn with_branch<R>(&self, read: impl FnOnce(&[Entry]) -> R) -> R {
        read(&self.state.lock().await.1)
    }

    /// Appends `payloads` atomically as a chain below the current leaf.
    pub(crate) async fn append(
        &self,
        emitter: &Emitter,
        payloads: Vec<EntryPayload>,
    ) -> Result<Vec<Entry>, SessionError> {
        let identified = payloads
            .into_iter()
            .map(|payload| (new_id(), payload))
            .collect();
        self.append_identified(emitter, identified).await
    }

    /// [`Self::append`] with ids chosen by the caller (a checkpoint that
    /// keeps nothing names itself as its first kept entry).
    pub(crate) async fn append_identified(
        &self,
        emitter: &Emitter,
        payloads: Vec<(String, EntryPayload)>,
    ) -> Result<Vec<Entry>, SessionError> {
        let mut state = self.state.lock().await;
        let mut parent = state.0.clone();
        let timestamp = now_ms();
        let entries: Vec<Entry> = payloads
            .into_iter()
            .map(|(id, payload)| Entry {
                id: id.clone(),
                parent_id: parent.replace(id),
                timestamp,
                payload,
            })
            .collect();
        self.store.append(&self.session_id, entries.clone()).await?;
        state.0 = parent;
        state.1.extend(entries.iter().cloned());
        if entries
            .iter()
            .any(|entry| matches!(entry.payload, EntryPayload::Checkpoint { .. }))
        {
            state.1 = keel_session::from_latest_checkpoint(std::mem::take(&mut state.1));
        }
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

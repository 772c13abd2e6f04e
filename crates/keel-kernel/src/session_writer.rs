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
//! This holds because a run is its session's only writer while it runs: it
//! holds the session's writer lease (`SessionStore::open_writer`) from
//! `create_run` until its result is published, and the store refuses a
//! second lease (`session_busy`).
//! It holds each message of the branch once, adapted for the run's model
//! and behind an `Arc` that every request shares (`context.rs`), so the
//! branch is in memory once.

use std::collections::HashSet;
use std::sync::Arc;

use keel_protocol::{Entry, EntryPayload, Message, RunEventKind};
use keel_session::{SessionError, SessionStore};
use tokio::sync::Mutex;

use crate::context::BranchEntry;
use crate::emitter::Emitter;
use crate::ids::{call_ids, new_id, now_ms};
use crate::pipeline::Frame;
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
    /// The run's provider and model, which the branch's messages are
    /// adapted for.
    provider: String,
    model: String,
    /// The leaf and the context branch that ends at it.
    state: Mutex<(Option<String>, Vec<BranchEntry>)>,
    /// Every tool-call id of the session (all branches, before any
    /// checkpoint too): a response's calls get ids outside it (`ids`).
    call_ids: Mutex<Arc<HashSet<String>>>,
}

impl SessionWriter {
    /// Opens the session for a run whose requests `frame` frames (the
    /// branch's messages are adapted for its provider and model).
    pub(crate) async fn open(
        store: Arc<dyn SessionStore>,
        session_id: String,
        frame: &Frame,
    ) -> Result<Self, SessionError> {
        let leaf = store.leaf(&session_id).await?;
        let context = store
            .context_branch(&session_id)
            .await?
            .into_iter()
            .map(|entry| BranchEntry::new(entry, &frame.provider, &frame.model))
            .collect();
        // The whole session, not only the context branch: an id used on
        // another branch or before a checkpoint is used all the same.
        let used = if leaf.is_some() {
            let entries = store.entries(&session_id).await?;
            calls_of(&entries).collect()
        } else {
            HashSet::new()
        };
        Ok(Self {
            store,
            session_id,
            provider: frame.provider.clone(),
            model: frame.model.clone(),
            state: Mutex::new((leaf, context)),
            call_ids: Mutex::new(Arc::new(used)),
        })
    }

    /// The tool-call ids the session used so far.
    pub(crate) async fn used_call_ids(&self) -> Arc<HashSet<String>> {
        Arc::clone(&*self.call_ids.lock().await)
    }

    /// The session's command receipts (its private journal directory), or
    /// `None` when the store keeps none.
    pub(crate) fn receipts(&self) -> Option<keel_tools::Receipts> {
        self.store
            .journal_dir(&self.session_id)
            .map(keel_tools::Receipts::new)
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

    /// The messages of the context branch for a request: the writer's own
    /// messages, shared, so a request copies no message of the branch.
    pub(crate) async fn project_context(&self) -> Vec<Arc<Message>> {
        crate::context::project(&self.state.lock().await.1)
    }

    /// Runs `read` on the context branch (the active branch from the latest
    /// checkpoint's first kept entry), under the writer's lock.
    pub(crate) async fn with_branch<R>(&self, read: impl FnOnce(&[BranchEntry]) -> R) -> R {
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
            .map(|(id, payload)| Entry::new(id.clone(), parent.replace(id), timestamp, payload))
            .collect();
        self.store.append(&self.session_id, entries.clone()).await?;
        let new_calls: Vec<String> = calls_of(&entries).collect();
        if !new_calls.is_empty() {
            let mut used = self.call_ids.lock().await;
            Arc::make_mut(&mut used).extend(new_calls);
        }
        state.0 = parent;
        state.1.extend(
            entries
                .iter()
                .map(|entry| BranchEntry::new(entry.clone(), &self.provider, &self.model)),
        );
        if entries
            .iter()
            .any(|entry| matches!(entry.payload, EntryPayload::Checkpoint { .. }))
        {
            state.1 = crate::context::from_latest_checkpoint(std::mem::take(&mut state.1));
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

/// The ids of the tool calls in `entries`' messages.
fn calls_of(entries: &[Entry]) -> impl Iterator<Item = String> + '_ {
    entries
        .iter()
        .filter_map(|entry| match &entry.payload {
            EntryPayload::Message { message } => Some(call_ids(message)),
            _ => None,
        })
        .flatten()
        .map(str::to_owned)
}

//! Token accounting: how many tokens a model context holds, estimated.
//!
//! Counts use tiktoken's o200k encoding ([`count_tokens`]). Its encoder
//! costs 0.16–0.7 s (idle to loaded machine) and about 46 MB to load, as
//! much as a whole short run (`docs/benchmarks.md`), so it is loaded
//! lazily — only when a run's context could come near its compaction
//! threshold, or when compaction plans a cut.
//! Below that, a context is estimated at four bytes per token, which is
//! safe there: no byte-level tokenizer (o200k, Claude's, Llama's) makes
//! more than one token per byte, so a context whose bytes (plus message
//! framing) are under half the threshold cannot be near it. Either way the
//! estimate is calibrated: each response's reported input tokens divided by
//! the estimate of the request that produced it gives a ratio, kept per
//! model and method for the run ([`Ledger`]).
//!
//! Texts over 64 KiB are counted by sampling: sixteen evenly spaced 4 KiB
//! windows are encoded exactly and the count is scaled to the whole text,
//! which keeps a megabyte under 20 ms (`docs/benchmarks.md`).
//!
//! Invariants: an entry is immutable, so its size is computed once per run
//! and cached by id; every function here is deterministic for its input.

use std::borrow::{Borrow, Cow};
use std::collections::HashMap;
use std::sync::OnceLock;

use keel_protocol::{ContentBlock, Entry, Message, ToolSpec, Usage, UserContent};
use tiktoken_rs::CoreBPE;

use crate::context::BranchEntry;

/// Bytes per token assumed by the cheap estimate.
const BYTES_PER_TOKEN: u64 = 4;
/// Tokens a message's framing (role, separators) adds.
const MESSAGE_TOKENS: u64 = 4;
/// Framing bytes assumed per message for the upper bound; generous, since
/// chat templates differ.
const MESSAGE_BOUND: u64 = 16;
/// Tokens assumed for one image.
const IMAGE_TOKENS: u64 = 1_200;
/// Texts up to this size are encoded exactly.
const EXACT_LIMIT: usize = 64 * 1024;
/// Windows sampled from a longer text.
const SAMPLES: usize = 16;

static O200K: OnceLock<Option<CoreBPE>> = OnceLock::new();

/// The o200k encoder, loaded on first use (`None` if its embedded data
/// failed to load, which only a broken build can cause).
fn encoder() -> Option<&'static CoreBPE> {
    O200K
        .get_or_init(|| match tiktoken_rs::o200k_base() {
            Ok(bpe) => Some(bpe),
            Err(error) => {
                tracing::warn!(%error, "the o200k encoder did not load; estimating by bytes");
                None
            }
        })
        .as_ref()
}

/// The o200k token count of `text` (sampled above 64 KiB; see the module
/// doc). Loads the encoder on first use.
pub fn count_tokens(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let Some(bpe) = encoder() else {
        return (text.len() as u64).div_ceil(BYTES_PER_TOKEN);
    };
    let exact = |piece: &str| bpe.encode_ordinary(piece).len() as u64;
    if text.len() <= EXACT_LIMIT {
        return exact(text);
    }
    let window = EXACT_LIMIT / SAMPLES;
    let stride = text.len() / SAMPLES;
    let (mut tokens, mut sampled) = (0u64, 0u64);
    for index in 0..SAMPLES {
        let start = text.floor_char_boundary(index * stride);
        let end = text.floor_char_boundary(start + window);
        if let Some(piece) = text.get(start..end) {
            tokens += exact(piece);
            sampled += piece.len() as u64;
        }
    }
    if sampled == 0 {
        return exact(text);
    }
    tokens.saturating_mul(text.len() as u64) / sampled
}

/// The o200k estimate of a whole request: system prompt, tool specs (as
/// JSON) and messages, each message with its framing. The same count the
/// kernel's precise estimate makes, before calibration. `messages` may be
/// owned or shared (a [`keel_provider::ModelRequest`]'s).
pub fn request_tokens<M: Borrow<Message>>(
    system_prompt: &str,
    tools: &[ToolSpec],
    messages: &[M],
) -> u64 {
    count_tokens(system_prompt)
        + count_tokens(&tools_text(tools))
        + messages
            .iter()
            .map(|message| message_tokens(message.borrow()))
            .sum::<u64>()
}

/// The tool specs as the text the estimate counts.
fn tools_text(tools: &[ToolSpec]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    serde_json::to_string(tools).unwrap_or_default()
}

/// The texts of a message that reach a model, and its image count.
fn message_parts(message: &Message) -> (Vec<Cow<'_, str>>, u64) {
    let mut texts: Vec<Cow<'_, str>> = Vec::new();
    let mut images = 0;
    let user_content = match message {
        Message::User(message) => Some(&message.content),
        Message::ToolResult(result) => {
            texts.push(Cow::Borrowed(result.call_id.as_str()));
            Some(&result.content)
        }
        Message::Assistant(message) => {
            for block in &message.content {
                match block {
                    ContentBlock::Text { text } => texts.push(Cow::Borrowed(text.as_str())),
                    ContentBlock::Thinking { thinking, .. } => {
                        texts.push(Cow::Borrowed(thinking.as_str()));
                    }
                    ContentBlock::ToolCall(call) => {
                        texts.push(Cow::Borrowed(call.id.as_str()));
                        texts.push(Cow::Borrowed(call.name.as_str()));
                        texts.push(Cow::Owned(call.arguments.to_string()));
                    }
                }
            }
            None
        }
    };
    for block in user_content.into_iter().flatten() {
        match block {
            UserContent::Text { text } => texts.push(Cow::Borrowed(text.as_str())),
            UserContent::Image(_) => images += 1,
        }
    }
    (texts, images)
}

/// The bytes of a message's texts and its image count.
fn message_bytes(message: &Message) -> (u64, u64) {
    let (texts, images) = message_parts(message);
    (texts.iter().map(|text| text.len() as u64).sum(), images)
}

/// The o200k tokens of a message, with its framing.
pub(crate) fn message_tokens(message: &Message) -> u64 {
    let (texts, images) = message_parts(message);
    texts.iter().map(|text| count_tokens(text)).sum::<u64>()
        + images * IMAGE_TOKENS
        + MESSAGE_TOKENS
}

/// How an estimate was made; calibration ratios are kept per method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Method {
    /// Four bytes per token: cheap, used far below the threshold.
    Bytes,
    /// o200k counts.
    O200k,
}

/// A calibrated estimate of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// The estimate before calibration.
    pub(crate) raw: u64,
    /// How `raw` was made.
    pub(crate) method: Method,
    /// The calibrated estimate: what the provider is expected to count.
    pub(crate) tokens: u64,
}

/// The size of an entry as the model sees it.
#[derive(Debug, Clone, Copy, Default)]
struct Size {
    bytes: u64,
    images: u64,
    /// Whether the entry is a message (counted with its framing).
    message: bool,
    tokens: Option<u64>,
}

impl Size {
    fn of(entry: &BranchEntry) -> Self {
        match entry.stored() {
            Some(message) => {
                let (bytes, images) = message_bytes(&message);
                Self {
                    bytes,
                    images,
                    message: true,
                    tokens: None,
                }
            }
            None => Self::default(),
        }
    }

    /// The o200k tokens, counted now if they were not yet.
    fn tokens(&mut self, entry: &BranchEntry) -> u64 {
        *self
            .tokens
            .get_or_insert_with(|| entry.stored().map_or(0, |message| message_tokens(&message)))
    }
}

/// The visible entries' sizes, in branch order, with running totals: the
/// context branch only grows at its end between checkpoints, so each
/// estimate counts only the entries appended since the last one.
#[derive(Debug, Default)]
struct Visible {
    rows: Vec<(String, Size)>,
    bytes: u64,
    images: u64,
    messages: u64,
    /// The sum of the rows' tokens, once every row is counted.
    tokens: Option<u64>,
}

impl Visible {
    /// Brings the rows up to `entries`; starts over when they are not a
    /// prefix of it (a checkpoint moved the start).
    fn update(&mut self, entries: &[BranchEntry]) {
        let aligned = self.rows.len() <= entries.len()
            && self.rows.first().is_none_or(|(id, _)| entries[0].id == *id)
            && self
                .rows
                .last()
                .is_none_or(|(id, _)| entries[self.rows.len() - 1].id == *id);
        if !aligned {
            *self = Self::default();
        }
        for entry in &entries[self.rows.len()..] {
            let mut size = Size::of(entry);
            self.bytes += size.bytes;
            self.images += size.images;
            self.messages += u64::from(size.message);
            if let Some(total) = &mut self.tokens {
                *total += size.tokens(entry);
            }
            self.rows.push((entry.id.clone(), size));
        }
    }

    /// The o200k tokens of every row, counting those not counted yet.
    fn tokens(&mut self, entries: &[BranchEntry]) -> u64 {
        if let Some(total) = self.tokens {
            return total;
        }
        let total = self
            .rows
            .iter_mut()
            .zip(entries)
            .map(|((_, size), entry)| size.tokens(entry))
            .sum();
        self.tokens = Some(total);
        total
    }
}

/// A run's token accounting: cached entry sizes and calibration ratios.
pub(crate) struct Ledger {
    /// The system prompt and the tool specs, as counted.
    fixed: String,
    fixed_tokens: Option<u64>,
    visible: Visible,
    /// The latest summary: checkpoint id, bytes, o200k tokens.
    summary: Option<(String, u64, Option<u64>)>,
    /// Token counts by entry id, for the compaction planner.
    entries: HashMap<String, u64>,
    ratios: HashMap<(String, Method), f64>,
}

impl Ledger {
    /// Accounting for requests with this system prompt and these tools.
    pub(crate) fn new(system_prompt: &str, tools: &[ToolSpec]) -> Self {
        Self {
            fixed: format!("{system_prompt}{}", tools_text(tools)),
            fixed_tokens: None,
            visible: Visible::default(),
            summary: None,
            entries: HashMap::new(),
            ratios: HashMap::new(),
        }
    }

    /// The estimate of a request holding the visible entries (`summary`:
    /// the latest checkpoint's id and summary, which stands first;
    /// `entries`: the entries from its first kept one, whose messages
    /// follow). `precise_from` is the upper bound in tokens from which
    /// o200k counts are used (`None`: never).
    pub(crate) fn estimate(
        &mut self,
        model: &str,
        summary: Option<(&str, &str)>,
        entries: &[BranchEntry],
        precise_from: Option<u64>,
    ) -> Estimate {
        self.visible.update(entries);
        let summary_bytes = match summary {
            Some((id, text)) => {
                if self.summary.as_ref().is_none_or(|(seen, ..)| seen != id) {
                    self.summary = Some((id.to_owned(), text.len() as u64, None));
                }
                text.len() as u64
            }
            None => 0,
        };
        let messages = self.visible.messages + u64::from(summary.is_some());
        let bytes = self.fixed.len() as u64 + self.visible.bytes + summary_bytes;
        let images = self.visible.images * IMAGE_TOKENS;
        let bound = bytes + images + messages * MESSAGE_BOUND;
        let (raw, method) = if precise_from.is_some_and(|from| bound >= from) {
            let fixed = *self
                .fixed_tokens
                .get_or_insert_with(|| count_tokens(&self.fixed));
            let summary_tokens = match (summary, &mut self.summary) {
                (Some((_, text)), Some((_, _, tokens))) => {
                    *tokens.get_or_insert_with(|| count_tokens(text) + MESSAGE_TOKENS)
                }
                _ => 0,
            };
            (
                fixed + summary_tokens + self.visible.tokens(entries),
                Method::O200k,
            )
        } else {
            (
                bytes.div_ceil(BYTES_PER_TOKEN) + images + messages * MESSAGE_TOKENS,
                Method::Bytes,
            )
        };
        let ratio = self.ratio(model, method);
        Estimate {
            raw,
            method,
            tokens: (raw as f64 * ratio).ceil() as u64,
        }
    }

    /// The o200k tokens of one entry as the model sees it (0 for an entry
    /// that is not a message or a checkpoint), cached.
    pub(crate) fn entry_tokens(&mut self, entry: &BranchEntry) -> u64 {
        if let Some(message) = entry.stored() {
            return self.tokens_of(&entry.id, || message_tokens(&message));
        }
        match entry.payload() {
            Some(keel_protocol::EntryPayload::Checkpoint { summary, .. }) => {
                self.tokens_of(&entry.id, || count_tokens(summary) + MESSAGE_TOKENS)
            }
            _ => 0,
        }
    }

    fn tokens_of(&mut self, id: &str, count: impl FnOnce() -> u64) -> u64 {
        if let Some(tokens) = self.entries.get(id) {
            return *tokens;
        }
        let tokens = count();
        self.entries.insert(id.to_owned(), tokens);
        tokens
    }

    /// Learns from a response: `usage` is what the provider counted for
    /// the request that `estimate` estimated.
    pub(crate) fn calibrate(&mut self, model: &str, estimate: &Estimate, usage: &Usage) {
        let reported = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
        self.calibrate_to(model, estimate, reported);
    }

    /// Learns that the provider counted `reported` tokens for the request
    /// `estimate` estimated (0: it did not say).
    pub(crate) fn calibrate_to(&mut self, model: &str, estimate: &Estimate, reported: u64) {
        if reported == 0 || estimate.raw == 0 {
            return;
        }
        let ratio = (reported as f64 / estimate.raw as f64).clamp(0.25, 4.0);
        self.ratios
            .insert((model.to_owned(), estimate.method), ratio);
    }

    /// The calibration ratio for `model` and `method` (1 until a response
    /// reported its input tokens).
    pub(crate) fn ratio(&self, model: &str, method: Method) -> f64 {
        self.ratios
            .get(&(model.to_owned(), method))
            .copied()
            .unwrap_or(1.0)
    }

    /// Forgets cached entry sizes (after a compaction, most are gone from
    /// the context for good).
    pub(crate) fn forget_entries(&mut self) {
        self.entries.clear();
        self.visible = Visible::default();
    }
}

/// One active entry as [`BranchUsage`] counts it: id, message bytes, and
/// the tokens its response reported.
type Counted = (String, u64, Option<u64>);

/// A cheap estimate of a stored session's model context, built one entry
/// at a time along its active branch (for hosts that show it, such as
/// `keel session show`, without loading the o200k encoder or holding the
/// entries): the input tokens the provider reported for the latest
/// response in the context, plus four bytes per token for the messages
/// after it — or for all of them when no response reported usage. The
/// system prompt and tool specs of a future run are not included.
#[derive(Debug, Clone, Default)]
pub struct BranchUsage {
    entries: Vec<Counted>,
    /// The latest checkpoint: its position, first kept entry and summary bytes.
    checkpoint: Option<(usize, String, u64)>,
    checkpoints: usize,
}

impl BranchUsage {
    /// Counts the next entry of the active branch (root first).
    pub fn push(&mut self, entry: &Entry) {
        let (bytes, reported) = match &entry.payload {
            keel_protocol::EntryPayload::Message { message } => {
                let (bytes, images) = message_bytes(message);
                let reported = match message {
                    Message::Assistant(assistant) => {
                        let usage = &assistant.usage;
                        let total = usage.input_tokens
                            + usage.cache_read_tokens
                            + usage.cache_write_tokens
                            + usage.output_tokens;
                        (total > 0).then_some(total)
                    }
                    _ => None,
                };
                (bytes + images * IMAGE_TOKENS * BYTES_PER_TOKEN, reported)
            }
            keel_protocol::EntryPayload::Checkpoint {
                summary,
                first_kept_entry_id,
                ..
            } => {
                self.checkpoints += 1;
                self.checkpoint = Some((
                    self.entries.len(),
                    first_kept_entry_id.clone(),
                    summary.len() as u64,
                ));
                (0, None)
            }
            _ => (0, None),
        };
        self.entries.push((entry.id.clone(), bytes, reported));
    }

    /// Checkpoints seen on the branch.
    pub fn checkpoints(&self) -> usize {
        self.checkpoints
    }

    /// The visible entries and the summary's bytes.
    fn visible(&self) -> (&[Counted], u64) {
        let Some((position, first_kept, summary)) = &self.checkpoint else {
            return (&self.entries, 0);
        };
        let start = self
            .entries
            .iter()
            .position(|(id, ..)| id == first_kept)
            .unwrap_or(position + 1);
        (self.entries.get(start..).unwrap_or_default(), *summary)
    }

    /// The input tokens the provider reported for the latest response in
    /// the context (its output included, since it is input from then on).
    pub fn reported_tokens(&self) -> Option<u64> {
        self.visible()
            .0
            .iter()
            .rev()
            .find_map(|(_, _, reported)| *reported)
    }

    /// The estimated tokens of the context's messages (see the type's doc).
    pub fn estimated_tokens(&self) -> u64 {
        let (visible, summary) = self.visible();
        let after = visible
            .iter()
            .rposition(|(_, _, reported)| reported.is_some());
        let (base, rest, summary) = match after {
            Some(at) => (visible[at].2.unwrap_or(0), &visible[at + 1..], 0),
            None => (0, visible, summary),
        };
        let bytes: u64 = summary + rest.iter().map(|(_, bytes, _)| bytes).sum::<u64>();
        let messages = rest.iter().filter(|(_, bytes, _)| *bytes > 0).count() as u64;
        base + bytes.div_ceil(BYTES_PER_TOKEN) + messages * MESSAGE_TOKENS
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use keel_protocol::{EntryPayload, UserMessage};

    fn entry(id: &str, text: &str) -> BranchEntry {
        let entry = Entry::new(
            id,
            None,
            0,
            EntryPayload::Message {
                message: Message::User(UserMessage::text(text)),
            },
        );
        BranchEntry::new(entry, "p", "m")
    }

    #[test]
    fn counts_are_o200k() {
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("hello world"), 2);
    }

    #[test]
    fn long_texts_are_sampled_close_to_the_exact_count() {
        let line = "fn main() { println!(\"hello, {}\", 40 + 2); } // a comment\n";
        let text = line.repeat(4_000);
        let bpe = tiktoken_rs::o200k_base().unwrap();
        let exact = bpe.encode_ordinary(&text).len() as f64;
        let sampled = count_tokens(&text) as f64;
        assert!((sampled / exact - 1.0).abs() < 0.05, "{sampled} vs {exact}");
    }

    #[test]
    fn below_the_precise_bound_bytes_are_used_and_above_it_o200k() {
        let mut ledger = Ledger::new("system", &[]);
        let entries = vec![entry("a", &"word ".repeat(400))];
        let cheap = ledger.estimate("m", None, &entries, Some(1_000_000));
        assert_eq!(cheap.method, Method::Bytes);
        assert_eq!(cheap.raw, (6u64 + 2_000).div_ceil(4) + MESSAGE_TOKENS);
        let precise = ledger.estimate("m", None, &entries, Some(100));
        assert_eq!(precise.method, Method::O200k);
        assert_eq!(
            precise.raw,
            count_tokens("system") + count_tokens(&"word ".repeat(400)) + 4
        );
        assert_eq!(
            ledger.estimate("m", None, &entries, None).method,
            Method::Bytes
        );
    }

    #[test]
    fn incremental_estimates_equal_fresh_ones() {
        let all: Vec<BranchEntry> = (0..20)
            .map(|n| entry(&format!("e{n}"), &"abc ".repeat(n * 10)))
            .collect();
        let mut ledger = Ledger::new("s", &[]);
        for end in 1..=all.len() {
            for precise in [None, Some(0)] {
                let incremental = ledger.estimate("m", None, &all[..end], precise);
                let fresh = Ledger::new("s", &[]).estimate("m", None, &all[..end], precise);
                assert_eq!(incremental, fresh, "{end} {precise:?}");
            }
        }
        let summary = Some(("k", "the summary"));
        let shifted = ledger.estimate("m", summary, &all[5..], Some(0));
        let fresh = Ledger::new("s", &[]).estimate("m", summary, &all[5..], Some(0));
        assert_eq!(shifted, fresh);
    }

    #[test]
    fn calibration_scales_estimates_per_model_and_method() {
        let mut ledger = Ledger::new("", &[]);
        let entries = vec![entry("a", &"x".repeat(4_000))];
        let first = ledger.estimate("m", None, &entries, None);
        let usage = {
            let mut usage = Usage::default();
            usage.input_tokens = first.raw * 3 / 2;
            usage
        };
        ledger.calibrate("m", &first, &usage);
        let second = ledger.estimate("m", None, &entries, None);
        assert_eq!(second.raw, first.raw);
        assert_eq!(second.tokens, (first.raw as f64 * 1.5).ceil() as u64);
        assert_eq!(
            ledger.estimate("other", None, &entries, None).tokens,
            first.raw
        );
        assert_eq!(ledger.ratio("m", Method::O200k), 1.0);
    }
}

//! Content blocks of one streamed response, addressed by the provider's key.
//!
//! Providers name blocks by an index (Anthropic) or by item and part
//! (Responses); deltas arrive in runs for one block, so the last block
//! looked up is remembered and a run costs no hashing.

use std::collections::HashMap;
use std::hash::Hash;

/// Blocks in the order they started, found by key.
#[derive(Debug)]
pub(crate) struct Blocks<K, V> {
    list: Vec<V>,
    by_key: HashMap<K, usize>,
    recent: Option<(K, usize)>,
}

impl<K, V> Default for Blocks<K, V> {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            by_key: HashMap::new(),
            recent: None,
        }
    }
}

impl<K: Copy + Eq + Hash, V> Blocks<K, V> {
    /// Whether a block with this key started.
    pub(crate) fn contains(&self, key: K) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Adds a block, or replaces the one with the same key in its place.
    pub(crate) fn insert(&mut self, key: K, block: V) {
        match self.by_key.get(&key).copied() {
            Some(position) => {
                if let Some(old) = self.list.get_mut(position) {
                    *old = block;
                }
            }
            None => {
                self.by_key.insert(key, self.list.len());
                self.list.push(block);
            }
        }
    }

    /// The block with this key.
    pub(crate) fn get_mut(&mut self, key: K) -> Option<&mut V> {
        let position = match self.recent {
            Some((recent, position)) if recent == key => position,
            _ => {
                let position = *self.by_key.get(&key)?;
                self.recent = Some((key, position));
                position
            }
        };
        self.list.get_mut(position)
    }

    /// Every block, in start order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.list.iter_mut()
    }
}

//! Typed values a call's context carries for the tools that know their type.
//!
//! The Tool API names nothing of the OS sandbox: the kernel puts what one
//! kind of tool needs (keel-tools' `ShellExecution` for `bash`: the sandbox,
//! the namespace holders and the call's command receipts) into the call's
//! [`Extensions`], and the tool that knows the type takes it out. A tool
//! that does not know a type cannot name it, so it never sees the value.
//!
//! Invariant: at most one value per type; a missing value is `None`, never
//! a panic, and the tool that needs it reports a typed error.

use std::any::{Any, TypeId};
use std::sync::Arc;

/// Values keyed by their type; cloning is cheap (the values are shared).
#[derive(Clone, Default)]
pub struct Extensions {
    values: Vec<(TypeId, Arc<dyn Any + Send + Sync>)>,
}

impl Extensions {
    /// No values.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `value` in, replacing the value of the same type if there was one.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        let key = TypeId::of::<T>();
        self.values.retain(|(held, _)| *held != key);
        self.values.push((key, Arc::new(value)));
    }

    /// The value of type `T`, if one was put in.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        let key = TypeId::of::<T>();
        self.values
            .iter()
            .find(|(held, _)| *held == key)
            .and_then(|(_, value)| value.as_ref().downcast_ref::<T>())
    }

    /// How many values are held.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The values need not be `Debug` (and may hold handles): count them.
        f.debug_struct("Extensions")
            .field("values", &self.values.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[derive(Debug, PartialEq)]
    struct Level(u8);

    #[test]
    fn a_value_is_found_by_its_type_and_replaced_by_the_next_of_that_type() {
        let mut extensions = Extensions::new();
        assert!(extensions.get::<Level>().is_none());
        extensions.insert(Level(1));
        extensions.insert(String::from("other"));
        extensions.insert(Level(2));
        assert_eq!(extensions.get::<Level>(), Some(&Level(2)));
        assert_eq!(extensions.get::<String>().unwrap(), "other");
        assert_eq!(extensions.len(), 2);
        assert!(extensions.get::<u8>().is_none());
    }
}

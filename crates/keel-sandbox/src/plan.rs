//! The byte form of a holder's launch plan: what the kernel process hands a
//! re-executed holder over its socket ([`super::reexec`]).
//!
//! The form is private to one binary — the holder is the same executable
//! as the process that planned it — so it has no version: a magic word,
//! then fields in a fixed order, integers little-endian, byte
//! strings as a `u32` length and the bytes, lists as a `u32` count and the
//! items. [`Reader`] refuses anything out of step (a short read, a count
//! beyond what the remaining bytes could hold, a byte string with a NUL,
//! trailing bytes) with [`PlanError`]: a holder given a damaged plan builds
//! nothing.

use std::ffi::CString;

/// First word of every plan.
pub(crate) const MAGIC: u32 = 0x4b50_4c31;
/// The largest plan accepted. A default view's plan is under 3 KiB; one
/// with thousands of masked paths is still far under this, and a hostile
/// plan of empty items cannot make the decoder hold more than about ten
/// times this much.
pub(crate) const MAX_PLAN: usize = 1 << 20;

/// Why a plan could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlanError {
    /// The plan ended before a field did.
    Short,
    /// The plan does not start with [`MAGIC`].
    Magic,
    /// A tag, count or value no plan holds.
    Invalid,
    /// Bytes are left after the last field.
    Trailing,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Self::Short => "the holder's plan ended early",
            Self::Magic => "the holder's plan does not start with its magic word",
            Self::Invalid => "the holder's plan holds a value out of range",
            Self::Trailing => "the holder's plan has bytes after its end",
        })
    }
}

/// Appends a plan's fields.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// A plan with its magic word.
    pub(crate) fn new() -> Self {
        let mut writer = Self::default();
        writer.u32(MAGIC);
        writer
    }

    pub(crate) fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub(crate) fn bool(&mut self, value: bool) {
        self.u8(u8::from(value));
    }

    pub(crate) fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn i32(&mut self, value: i32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// A count or length; plans never hold 4 GiB of anything (the caller
    /// checks the whole against [`MAX_PLAN`]).
    pub(crate) fn len(&mut self, value: usize) {
        self.u32(u32::try_from(value).unwrap_or(u32::MAX));
    }

    pub(crate) fn bytes(&mut self, value: &[u8]) {
        self.len(value.len());
        self.bytes.extend_from_slice(value);
    }

    pub(crate) fn c_string(&mut self, value: &CString) {
        self.bytes(value.as_bytes());
    }

    /// The plan, or `None` when it is larger than [`MAX_PLAN`].
    pub(crate) fn finish(self) -> Option<Vec<u8>> {
        (self.bytes.len() <= MAX_PLAN).then_some(self.bytes)
    }
}

/// Reads a plan's fields in the order [`Writer`] wrote them.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Checks the magic word.
    pub(crate) fn new(plan: &'a [u8]) -> Result<Self, PlanError> {
        let mut reader = Self { rest: plan };
        if reader.u32()? != MAGIC {
            return Err(PlanError::Magic);
        }
        Ok(reader)
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], PlanError> {
        if count > self.rest.len() {
            return Err(PlanError::Short);
        }
        let (taken, rest) = self.rest.split_at(count);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PlanError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, PlanError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn bool(&mut self) -> Result<bool, PlanError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(PlanError::Invalid),
        }
    }

    pub(crate) fn u32(&mut self) -> Result<u32, PlanError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, PlanError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, PlanError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of items each at least `item_size` bytes long: refused when
    /// the rest of the plan could not hold them, so a hostile count never
    /// makes the reader reserve memory.
    pub(crate) fn count(&mut self, item_size: usize) -> Result<usize, PlanError> {
        let count = usize::try_from(self.u32()?).map_err(|_| PlanError::Invalid)?;
        if count.saturating_mul(item_size.max(1)) > self.rest.len() {
            return Err(PlanError::Short);
        }
        Ok(count)
    }

    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, PlanError> {
        let length = self.count(1)?;
        Ok(self.take(length)?.to_vec())
    }

    pub(crate) fn c_string(&mut self) -> Result<CString, PlanError> {
        CString::new(self.bytes()?).map_err(|_| PlanError::Invalid)
    }

    /// Ends the plan: nothing may follow its last field.
    pub(crate) fn finish(self) -> Result<(), PlanError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(PlanError::Trailing)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn fields_come_back_in_order() {
        let mut writer = Writer::new();
        writer.u8(7);
        writer.bool(true);
        writer.u32(0xdead_beef);
        writer.i32(-5);
        writer.u64(u64::MAX);
        writer.c_string(&CString::new("/tmp").unwrap());
        writer.bytes(b"");
        let plan = writer.finish().unwrap();
        let mut reader = Reader::new(&plan).unwrap();
        assert_eq!(reader.u8().unwrap(), 7);
        assert!(reader.bool().unwrap());
        assert_eq!(reader.u32().unwrap(), 0xdead_beef);
        assert_eq!(reader.i32().unwrap(), -5);
        assert_eq!(reader.u64().unwrap(), u64::MAX);
        assert_eq!(reader.c_string().unwrap().as_bytes(), b"/tmp");
        assert!(reader.bytes().unwrap().is_empty());
        reader.finish().unwrap();
    }

    #[test]
    fn damaged_plans_are_refused() {
        assert_eq!(Reader::new(b"").unwrap_err(), PlanError::Short);
        assert_eq!(Reader::new(&[0; 4]).unwrap_err(), PlanError::Magic);
        let mut writer = Writer::new();
        writer.bytes(b"a\0b");
        let plan = writer.finish().unwrap();
        assert_eq!(
            Reader::new(&plan).unwrap().c_string().unwrap_err(),
            PlanError::Invalid
        );
        // A count far beyond the bytes left reserves nothing.
        let mut writer = Writer::new();
        writer.u32(u32::MAX);
        let plan = writer.finish().unwrap();
        assert_eq!(
            Reader::new(&plan).unwrap().count(8).unwrap_err(),
            PlanError::Short
        );
        let mut writer = Writer::new();
        writer.u8(2);
        let plan = writer.finish().unwrap();
        assert_eq!(
            Reader::new(&plan).unwrap().bool().unwrap_err(),
            PlanError::Invalid
        );
        let plan = Writer::new().finish().unwrap();
        let mut long = plan.clone();
        long.push(0);
        assert_eq!(
            Reader::new(&long).unwrap().finish().unwrap_err(),
            PlanError::Trailing
        );
    }
}

//! A server-sent events decoder: bytes in, whole events out.
//!
//! It follows the WHATWG `text/event-stream` rules that providers rely on:
//! lines end in `\n`, `\r\n` or `\r`; `event:` names the event, `data:` lines
//! accumulate (joined by `\n`), a blank line dispatches, `:` starts a
//! comment, one space after the colon is dropped, an event without data is
//! not dispatched, and an unfinished event at the end of the stream is
//! discarded. Bytes are buffered until a line is complete, so a UTF-8
//! character split across network chunks is decoded whole; invalid UTF-8 is
//! replaced, never a panic.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (`message` when absent).
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Incremental decoder state.
#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    /// Whether the previous chunk ended in `\r` (a following `\n` belongs to it).
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds bytes; complete events are appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut impl Extend<SseEvent>) {
        let mut rest = bytes;
        if self.after_cr && rest.first() == Some(&b'\n') {
            rest = rest.get(1..).unwrap_or_default();
        }
        self.after_cr = false;
        while let Some(end) = find_line_end(rest) {
            let line = rest.get(..end).unwrap_or_default();
            let mut next = end + 1;
            if rest.get(end) == Some(&b'\r') {
                match rest.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.buffer.is_empty() {
                self.line(line, out);
            } else {
                // The line began in an earlier chunk; the buffer is reused.
                let mut whole = std::mem::take(&mut self.buffer);
                whole.extend_from_slice(line);
                self.line(&whole, out);
                whole.clear();
                self.buffer = whole;
            }
            rest = rest.get(next..).unwrap_or_default();
        }
        self.buffer.extend_from_slice(rest);
    }

    fn line(&mut self, line: &[u8], out: &mut impl Extend<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                self.event.clear();
                push_lossy(&mut self.event, value);
            }
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                push_lossy(&mut self.data, value);
                self.has_data = true;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut impl Extend<SseEvent>) {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        if std::mem::take(&mut self.has_data) {
            let event = if event.is_empty() {
                "message".to_owned()
            } else {
                event
            };
            out.extend(std::iter::once(SseEvent { event, data }));
        }
    }
}

/// Appends `bytes` as text, invalid UTF-8 replaced (valid text, the usual
/// case, takes the fast check).
fn push_lossy(target: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => target.push_str(text),
        Err(_) => target.push_str(&String::from_utf8_lossy(bytes)),
    }
}

/// The position of the first `\n` or `\r` in `bytes`, eight bytes at a time.
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    const CR: u64 = u64::from_ne_bytes([b'\r'; 8]);
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let mut array = [0; 8];
        array.copy_from_slice(word);
        let word = u64::from_le_bytes(array);
        // A byte of `lf` (`cr`) is zero where the word holds `\n` (`\r`).
        // The zero-byte test flags every such byte; it may also flag a
        // byte above a true one (a borrow), so only the lowest flag counts.
        let (lf, cr) = (word ^ LF, word ^ CR);
        let found = ((lf.wrapping_sub(ONES) & !lf) | (cr.wrapping_sub(ONES) & !cr)) & HIGHS;
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&byte| byte == b'\n' || byte == b'\r')
        .map(|position| offset + position)
}

/// Typed decoding of event `data`, for parsers' hot paths: JSON strings
/// borrowed where they have no escapes, and objects read field by field.
///
/// Whatever these types accept, a `serde_json::Value` accepts too: ignored
/// values are checked exactly as a `Value` would check them (number range,
/// nesting depth, escapes), so a typed path never takes in data that the
/// generic path would reject.
pub(crate) mod json {
    use std::borrow::Cow;

    use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};

    /// A JSON string: borrowed from the data when it has no escapes, owned
    /// otherwise.
    #[derive(Debug)]
    pub(crate) struct JsonStr<'a>(pub(crate) Cow<'a, str>);

    impl JsonStr<'_> {
        /// The text.
        pub(crate) fn as_str(&self) -> &str {
            &self.0
        }
    }

    impl<'de: 'a, 'a> Deserialize<'de> for JsonStr<'a> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct StrVisitor;

            impl<'de> Visitor<'de> for StrVisitor {
                type Value = JsonStr<'de>;

                fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    formatter.write_str("a string")
                }

                fn visit_borrowed_str<E: Error>(self, text: &'de str) -> Result<Self::Value, E> {
                    Ok(JsonStr(Cow::Borrowed(text)))
                }

                fn visit_str<E: Error>(self, text: &str) -> Result<Self::Value, E> {
                    Ok(JsonStr(Cow::Owned(text.to_owned())))
                }

                fn visit_string<E: Error>(self, text: String) -> Result<Self::Value, E> {
                    Ok(JsonStr(Cow::Owned(text)))
                }
            }

            deserializer.deserialize_str(StrVisitor)
        }
    }

    /// Any JSON value, checked as a `serde_json::Value` would be and
    /// dropped. (`serde::de::IgnoredAny` is more lenient: it skips numbers
    /// without parsing them, and nesting without a depth limit.)
    pub(crate) struct Skip;

    impl<'de> Deserialize<'de> for Skip {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(SkipVisitor)
        }
    }

    struct SkipVisitor;

    impl<'de> Visitor<'de> for SkipVisitor {
        type Value = Skip;

        fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("any valid JSON value")
        }

        fn visit_bool<E: Error>(self, _: bool) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_i64<E: Error>(self, _: i64) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_u64<E: Error>(self, _: u64) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_f64<E: Error>(self, _: f64) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_str<E: Error>(self, _: &str) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_unit<E: Error>(self) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_none<E: Error>(self) -> Result<Skip, E> {
            Ok(Skip)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Skip, A::Error> {
            while items.next_element::<Skip>()?.is_some() {}
            Ok(Skip)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Skip, A::Error> {
            while entries.next_key::<JsonStr<'de>>()?.is_some() {
                entries.next_value::<Skip>()?;
            }
            Ok(Skip)
        }
    }

    /// A struct read from a JSON object by [`read_object`]: the typed hot
    /// path of an event's data. Starts from `Default`; [`TypedObject::field`]
    /// fills what it knows.
    pub(crate) trait TypedObject<'de>: Default {
        /// What the visitor expects, for error messages.
        const EXPECTING: &'static str;

        /// Reads the value of `key` into `self` and returns `true`, or
        /// returns `false` for a key it does not know.
        fn field<A: MapAccess<'de>>(
            &mut self,
            key: &str,
            fields: &mut Fields<'_, A>,
        ) -> Result<bool, A::Error>;
    }

    /// Implements `Deserialize` (through [`TypedObject`]) for a struct with
    /// one lifetime whose fields are read from JSON keys: `NUMBER: "key" =>
    /// field`, numbers distinct and below 32 (they catch repeated keys);
    /// `=> field (Some)` wraps the value, to tell `null` from absent.
    macro_rules! typed_object {
        ($name:ident, $expecting:literal, {
            $($number:literal : $key:literal => $field:ident $(($wrap:path))?),* $(,)?
        }) => {
            impl<'de: 'a, 'a> serde::de::Deserialize<'de> for $name<'a> {
                fn deserialize<D: serde::de::Deserializer<'de>>(
                    deserializer: D,
                ) -> Result<Self, D::Error> {
                    $crate::sse::json::deserialize_object::<D, $name<'de>>(deserializer)
                }
            }

            impl<'de> $crate::sse::json::TypedObject<'de> for $name<'de> {
                const EXPECTING: &'static str = $expecting;

                fn field<A: serde::de::MapAccess<'de>>(
                    &mut self,
                    key: &str,
                    fields: &mut $crate::sse::json::Fields<'_, A>,
                ) -> Result<bool, A::Error> {
                    match key {
                        $($key => self.$field = $($wrap)?(fields.read($number, $key)?),)*
                        _ => return Ok(false),
                    }
                    Ok(true)
                }
            }
        };
    }
    pub(crate) use typed_object;

    /// Deserializes a [`TypedObject`] from a JSON object.
    pub(crate) fn deserialize_object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: TypedObject<'de>,
    {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);

        impl<'de, T: TypedObject<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str(T::EXPECTING)
            }

            fn visit_map<A: MapAccess<'de>>(self, entries: A) -> Result<T, A::Error> {
                let mut object = T::default();
                read_object(entries, |key, fields| object.field(key, fields))?;
                Ok(object)
            }
        }

        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }

    /// Reads a JSON object's entries: `field` reads the value of each key it
    /// knows (with [`Fields::read`]) and returns `true`; other values are
    /// checked and dropped.
    pub(crate) fn read_object<'de, A: MapAccess<'de>>(
        mut entries: A,
        mut field: impl FnMut(&str, &mut Fields<'_, A>) -> Result<bool, A::Error>,
    ) -> Result<(), A::Error> {
        let mut seen = 0_u32;
        while let Some(key) = entries.next_key::<JsonStr<'de>>()? {
            let mut fields = Fields {
                entries: &mut entries,
                seen: &mut seen,
            };
            if !field(key.as_str(), &mut fields)? {
                entries.next_value::<Skip>()?;
            }
        }
        Ok(())
    }

    /// Access to the value of the current entry, for [`read_object`].
    pub(crate) struct Fields<'m, A> {
        entries: &'m mut A,
        seen: &'m mut u32,
    }

    impl<'de, A: MapAccess<'de>> Fields<'_, A> {
        /// The value of field number `number` (below 32) called `name`; a
        /// field that appears twice is an error (a `Value` would keep the
        /// last, so the caller's generic path must decide).
        pub(crate) fn read<T: Deserialize<'de>>(
            &mut self,
            number: u32,
            name: &'static str,
        ) -> Result<T, A::Error> {
            let bit = 1_u32 << (number % 32);
            if *self.seen & bit != 0 {
                return Err(A::Error::duplicate_field(name));
            }
            *self.seen |= bit;
            self.entries.next_value()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk, &mut out);
        }
        out
    }

    fn event(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn follows_the_event_stream_rules() {
        let text = b": comment\nevent: ping\ndata: {}\n\ndata:a\ndata: b\n\nevent: lonely\n\ndata: x\r\n\r\ndata: cr\r\rdata: tail";
        assert_eq!(
            decode(&[text]),
            [
                event("ping", "{}"),
                event("message", "a\nb"),
                event("message", "x"),
                event("message", "cr")
            ]
        );
    }

    #[test]
    fn line_ends_are_found_in_every_position() {
        for length in 0..40 {
            for at in 0..length {
                for end in [b'\n', b'\r'] {
                    // `end ^ 1` is where the zero-byte test could misfire.
                    let mut bytes = vec![end ^ 1; length];
                    bytes[at] = end;
                    assert_eq!(find_line_end(&bytes), Some(at), "{bytes:?}");
                }
            }
            assert_eq!(find_line_end(&vec![b'\n' ^ 1; length]), None);
            assert_eq!(find_line_end(&vec![b'\r' ^ 1; length]), None);
        }
    }

    #[test]
    fn typed_fields_accept_only_what_a_value_accepts() {
        use super::json::{JsonStr, Skip, read_object};
        use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

        struct One<'a>(Option<JsonStr<'a>>);

        impl<'de: 'a, 'a> Deserialize<'de> for One<'a> {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct OneVisitor;
                impl<'de> Visitor<'de> for OneVisitor {
                    type Value = One<'de>;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<One<'de>, A::Error> {
                        let mut one = One(None);
                        read_object(map, |key, fields| {
                            if key == "a" {
                                one.0 = fields.read(0, "a")?;
                                return Ok(true);
                            }
                            Ok(false)
                        })?;
                        Ok(one)
                    }
                }
                deserializer.deserialize_map(OneVisitor)
            }
        }

        fn parse(text: &str) -> Result<Option<JsonStr<'_>>, serde_json::Error> {
            serde_json::from_str::<One<'_>>(text).map(|one| one.0)
        }
        let value_ok = |text: &str| serde_json::from_str::<serde_json::Value>(text).is_ok();
        let borrowed = parse(r#"{"a":"plain","b":[1,{"c":null}]}"#);
        assert!(matches!(
            borrowed,
            Ok(Some(JsonStr(std::borrow::Cow::Borrowed("plain"))))
        ));
        let escaped = parse(r#"{"a":"line\nbreak"}"#);
        assert!(
            matches!(escaped, Ok(Some(JsonStr(std::borrow::Cow::Owned(text)))) if text == "line\nbreak")
        );
        let deep = format!(r#"{{"b":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        for text in [
            r#"{"a":"x","a":"y"}"#,
            r#"["x"]"#,
            r#"{"b":1e400}"#,
            r#"{"b":"\ud800"}"#,
            deep.as_str(),
        ] {
            assert!(parse(text).is_err(), "{text}");
            // Duplicates and arrays are fine for a `Value`, but the generic
            // path must decide what they mean.
            if !text.contains(r#""a":"x","a""#) && !text.starts_with('[') {
                assert!(!value_ok(text), "{text}");
            }
        }
        assert!(serde_json::from_str::<Skip>(r#"{"k":[1,-2,3.5,true,null,"s"]}"#).is_ok());
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let text = "event: a\ndata: héllo wörld ✓\r\n\r\ndata: [DONE]\n\n".as_bytes();
        let whole = decode(&[text]);
        for cut in 0..text.len() {
            for second in cut..text.len() {
                let parts = [&text[..cut], &text[cut..second], &text[second..]];
                assert_eq!(decode(&parts), whole, "cut at {cut} and {second}");
            }
        }
    }
}

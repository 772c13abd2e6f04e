//! Typed decoding of event `data`, for parsers' hot paths: JSON strings
//! borrowed where they have no escapes, and objects read field by field.
//!
//! Whatever these types accept, a `serde_json::Value` accepts too: ignored
//! values are checked exactly as a `Value` would check them (number range,
//! nesting depth, escapes), so a typed path never takes in data that the
//! generic path would reject.

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
                $crate::json::typed::deserialize_object::<D, $name<'de>>(deserializer)
            }
        }

        impl<'de> $crate::json::typed::TypedObject<'de> for $name<'de> {
            const EXPECTING: &'static str = $expecting;

            fn field<A: serde::de::MapAccess<'de>>(
                &mut self,
                key: &str,
                fields: &mut $crate::json::typed::Fields<'_, A>,
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

#[cfg(test)]
mod tests {
    #[test]
    fn typed_fields_accept_only_what_a_value_accepts() {
        use super::{JsonStr, Skip, read_object};
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
}

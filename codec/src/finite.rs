//! State written as JSON that reads back as it was written.
//!
//! serde_json writes a float that is not finite (an infinity, NaN) as
//! `null`, which does not read back as a number: state holding one would
//! be written at a checkpoint and then fail every restore. So state is
//! written by [`write_state_json`], which refuses such a value when it is
//! written, naming it. Checking costs a second walk over the value, taken
//! only when the JSON holds a `null` — which most state never does.

use serde::Serialize;
use serde::ser;

use crate::json::write_json;

/// Appends `value` as JSON to `out` as [`write_json`] does, or fails,
/// leaving `out` as it was, if the value holds a float that is not finite.
pub fn write_state_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    let start = out.len();
    write_json(out, value)?;
    let written = &out[start..];
    if written.windows(4).any(|w| w == b"null") && value.serialize(FiniteFloats).is_err() {
        out.truncate(start);
        return Err(ser::Error::custom(
            "it holds a float that is not finite (infinite or NaN), which JSON cannot store: it would read back \
             as null; keep such values out of state (clamp them, or store an Option or a flag)",
        ));
    }
    Ok(())
}

/// A serializer that writes nothing and fails at the first float that is
/// not finite.
struct FiniteFloats;

#[derive(Debug)]
struct NotFinite;

impl std::fmt::Display for NotFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a float that is not finite")
    }
}

impl std::error::Error for NotFinite {}

impl ser::Error for NotFinite {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        NotFinite
    }
}

type Checked = Result<(), NotFinite>;

/// Serializer methods whose value is checked no further.
macro_rules! accept {
    ($($method:ident($($ty:ty),*);)*) => {
        $(fn $method(self $(, _: $ty)*) -> Checked { Ok(()) })*
    };
}

impl ser::Serializer for FiniteFloats {
    type Ok = ();
    type Error = NotFinite;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    accept! {
        serialize_bool(bool); serialize_i8(i8); serialize_i16(i16); serialize_i32(i32); serialize_i64(i64);
        serialize_i128(i128); serialize_u8(u8); serialize_u16(u16); serialize_u32(u32); serialize_u64(u64);
        serialize_u128(u128); serialize_char(char); serialize_str(&str); serialize_bytes(&[u8]);
        serialize_none(); serialize_unit(); serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_f32(self, v: f32) -> Checked {
        if v.is_finite() { Ok(()) } else { Err(NotFinite) }
    }

    fn serialize_f64(self, v: f64) -> Checked {
        if v.is_finite() { Ok(()) } else { Err(NotFinite) }
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Checked {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Checked {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(self, _: &'static str, _: u32, _: &'static str, value: &T) -> Checked {
        value.serialize(self)
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self, NotFinite> {
        Ok(self)
    }

    fn serialize_tuple(self, _: usize) -> Result<Self, NotFinite> {
        Ok(self)
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self, NotFinite> {
        Ok(self)
    }

    fn serialize_tuple_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self, NotFinite> {
        Ok(self)
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self, NotFinite> {
        Ok(self)
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, NotFinite> {
        Ok(self)
    }

    fn serialize_struct_variant(self, _: &'static str, _: u32, _: &'static str, _: usize) -> Result<Self, NotFinite> {
        Ok(self)
    }
}

/// The elements of every compound value are checked alike.
macro_rules! elements {
    ($($trait:ident :: $method:ident($($name:ty),*);)*) => {$(
        impl ser::$trait for FiniteFloats {
            type Ok = ();
            type Error = NotFinite;

            fn $method<T: Serialize + ?Sized>(&mut self, $(_: $name,)* value: &T) -> Checked {
                value.serialize(FiniteFloats)
            }

            fn end(self) -> Checked {
                Ok(())
            }
        }
    )*};
}

elements! {
    SerializeSeq::serialize_element();
    SerializeTuple::serialize_element();
    SerializeTupleStruct::serialize_field();
    SerializeTupleVariant::serialize_field();
    SerializeStruct::serialize_field(&'static str);
    SerializeStructVariant::serialize_field(&'static str);
}

impl ser::SerializeMap for FiniteFloats {
    type Ok = ();
    type Error = NotFinite;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Checked {
        key.serialize(FiniteFloats)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Checked {
        value.serialize(FiniteFloats)
    }

    fn end(self) -> Checked {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn finite_values_are_written_as_serde_json_writes_them_and_others_refused() {
        let mut out = b"kept".to_vec();
        write_state_json(&mut out, &(1.5f64, None::<f64>, "null")).unwrap();
        assert_eq!(out, b"kept[1.5,null,\"null\"]");
        for refused in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
            let nested: BTreeMap<&str, Vec<Option<f64>>> = [("sums", vec![Some(1.0), Some(refused)])].into();
            let error = write_state_json(&mut out, &nested).unwrap_err();
            assert!(error.to_string().contains("not finite"), "{error}");
            assert_eq!(out, b"kept[1.5,null,\"null\"]", "nothing is appended");
        }
        assert!(write_state_json(&mut out, &(1, f32::NAN)).is_err());
    }
}

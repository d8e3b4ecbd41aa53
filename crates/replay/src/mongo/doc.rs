//! The few BSON edits a MongoDB replay needs, on whole documents held in memory: walk a
//! document's top-level elements (every length checked against its container), read an
//! integer or a sub-document, and rebuild the document with elements dropped or replaced.
//! Everything not edited keeps its bytes exactly (no decode and re-encode of values).

use proto::mongodb::bson::ty;

/// One top-level element: its type, key, and ranges in the document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elem<'a> {
    pub ty: u8,
    pub key: &'a [u8],
    /// Start of the element (its type byte).
    pub start: usize,
    /// Start of its value.
    pub value: usize,
    /// End of the element.
    pub end: usize,
}

fn le_i32(b: &[u8], at: usize) -> Option<i32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(i32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le_i64(b: &[u8], at: usize) -> Option<i64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(i64::from_le_bytes(a))
}

/// The length a document at the start of `b` declares, if it fits in `b` and is sane.
pub fn doc_len(b: &[u8]) -> Option<usize> {
    let n = usize::try_from(le_i32(b, 0)?).ok()?;
    (n >= 5 && n <= b.len()).then_some(n)
}

fn cstr_end(b: &[u8], at: usize) -> Option<usize> {
    let rest = b.get(at..)?;
    rest.iter().position(|&c| c == 0).map(|p| at + p + 1)
}

/// The length of a value of type `t` starting at `at` in `b`.
fn value_len(t: u8, b: &[u8], at: usize) -> Option<usize> {
    let n = |x: i32| usize::try_from(x).ok();
    Some(match t {
        ty::DOUBLE | ty::DATETIME | ty::TIMESTAMP | ty::INT64 => 8,
        ty::STRING | ty::JAVASCRIPT | ty::SYMBOL => 4 + n(le_i32(b, at)?).filter(|&l| l >= 1)?,
        ty::DOCUMENT | ty::ARRAY | ty::CODE_W_SCOPE => n(le_i32(b, at)?).filter(|&l| l >= 5)?,
        ty::BINARY => 5 + n(le_i32(b, at)?)?,
        ty::UNDEFINED | ty::NULL | ty::MIN_KEY | ty::MAX_KEY => 0,
        ty::OBJECT_ID => 12,
        ty::BOOL => 1,
        ty::REGEX => cstr_end(b, cstr_end(b, at)?)? - at,
        ty::DB_POINTER => 4 + n(le_i32(b, at)?).filter(|&l| l >= 1)? + 12,
        ty::INT32 => 4,
        ty::DECIMAL128 => 16,
        _ => return None,
    })
}

/// The top-level elements of the document at the start of `doc`; `None` when it is not a
/// well-formed document.
pub fn elements(doc: &[u8]) -> Option<Vec<Elem<'_>>> {
    let len = doc_len(doc)?;
    let doc = doc.get(..len)?;
    let mut out = Vec::new();
    let mut at = 4;
    loop {
        let t = *doc.get(at)?;
        if t == 0 {
            return (at + 1 == len).then_some(out);
        }
        let key_end = cstr_end(doc, at + 1)?;
        let key = doc.get(at + 1..key_end - 1)?;
        let end = key_end.checked_add(value_len(t, doc, key_end)?)?;
        if end >= len {
            return None;
        }
        out.push(Elem {
            ty: t,
            key,
            start: at,
            value: key_end,
            end,
        });
        at = end;
    }
}

/// The element named `key`.
pub fn get<'a>(doc: &'a [u8], key: &[u8]) -> Option<Elem<'a>> {
    elements(doc)?.into_iter().find(|e| e.key == key)
}

/// An integer element's value (int64, int32, or a whole double).
pub fn int(doc: &[u8], e: &Elem<'_>) -> Option<i64> {
    match e.ty {
        ty::INT64 => le_i64(doc, e.value),
        ty::INT32 => le_i32(doc, e.value).map(i64::from),
        ty::DOUBLE => {
            let v = f64::from_bits(le_i64(doc, e.value)? as u64);
            (v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
        }
        _ => None,
    }
}

/// A document or array element's bytes.
pub fn sub<'a>(doc: &'a [u8], e: &Elem<'_>) -> Option<&'a [u8]> {
    matches!(e.ty, ty::DOCUMENT | ty::ARRAY).then(|| doc.get(e.value..e.end))?
}

/// What happens to an element when a document is rebuilt.
pub enum Edit {
    Keep,
    Drop,
    /// The element is replaced by these bytes (a whole element: type, key, value).
    Put(Vec<u8>),
}

/// The document rebuilt with `edit` applied to each top-level element.
pub fn rebuild(doc: &[u8], mut edit: impl FnMut(&Elem<'_>) -> Edit) -> Option<Vec<u8>> {
    let els = elements(doc)?;
    let mut out = vec![0u8; 4];
    for e in &els {
        match edit(e) {
            Edit::Keep => out.extend_from_slice(doc.get(e.start..e.end)?),
            Edit::Drop => {}
            Edit::Put(b) => out.extend_from_slice(&b),
        }
    }
    out.push(0);
    let n = u32::try_from(out.len()).ok()?.to_le_bytes();
    out.get_mut(..4)?.copy_from_slice(&n);
    Some(out)
}

/// An int64 element.
pub fn elem_i64(key: &[u8], v: i64) -> Vec<u8> {
    let mut out = vec![ty::INT64];
    out.extend_from_slice(key);
    out.push(0);
    out.extend_from_slice(&v.to_le_bytes());
    out
}

/// An array element of int64 values.
pub fn elem_i64_array(key: &[u8], vals: &[i64]) -> Vec<u8> {
    let mut arr = vec![0u8; 4];
    for (i, v) in vals.iter().enumerate() {
        arr.extend(elem_i64(i.to_string().as_bytes(), *v));
    }
    arr.push(0);
    let n = (arr.len() as u32).to_le_bytes();
    arr[..4].copy_from_slice(&n);
    let mut out = vec![ty::ARRAY];
    out.extend_from_slice(key);
    out.push(0);
    out.extend(arr);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proto::mongodb::bson::build::Doc;

    #[test]
    fn walks_edits_and_reads() {
        let d = Doc::new()
            .i64("getMore", 77)
            .str("collection", "c")
            .doc("lsid", Doc::new().bin("id", &[1; 16]))
            .arr_i64("cursors", &[1, 2])
            .regex("r", "a", "i")
            .bytes();
        let els = elements(&d).expect("well formed");
        let keys: Vec<&[u8]> = els.iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            [&b"getMore"[..], b"collection", b"lsid", b"cursors", b"r"]
        );
        assert_eq!(int(&d, &els[0]), Some(77));
        let out = rebuild(&d, |e| match e.key {
            b"getMore" => Edit::Put(elem_i64(b"getMore", 5)),
            b"lsid" => Edit::Drop,
            b"cursors" => Edit::Put(elem_i64_array(b"cursors", &[9])),
            _ => Edit::Keep,
        })
        .expect("rebuilt");
        let want = Doc::new()
            .i64("getMore", 5)
            .str("collection", "c")
            .arr_i64("cursors", &[9])
            .regex("r", "a", "i")
            .bytes();
        assert_eq!(out, want);
        let g = get(&out, b"cursors").expect("cursors");
        let arr = sub(&out, &g).expect("array");
        let ids: Vec<i64> = elements(arr)
            .expect("array")
            .iter()
            .filter_map(|e| int(arr, e))
            .collect();
        assert_eq!(ids, [9]);
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Some(els) = elements(&b) {
                for e in &els {
                    let _ = int(&b, e);
                    let _ = sub(&b, e).map(elements);
                }
            }
            let _ = rebuild(&b, |_| Edit::Keep);
        }

        #[test]
        fn rebuild_keep_is_identity(n in 0i64..1000, s in "[a-z]{0,20}") {
            let d = Doc::new().i64("a", n).str("b", &s).doc("c", Doc::new().i32("x", 1)).bytes();
            prop_assert_eq!(rebuild(&d, |_| Edit::Keep), Some(d));
        }
    }
}

//! A captured MongoDB request as the target gets it: the checksum and exhaust flags cleared,
//! `$clusterTime` dropped (it is signed by the captured deployment), session fields kept with
//! a session id of the replay's own or dropped when the target has no sessions, cursor ids of
//! getMore / killCursors (OP_MSG and legacy) replaced by the target's, and the captured
//! authentication skipped (dbtap logs in itself: [`super::auth`]). OP_COMPRESSED is sent as the
//! message it wraps, decompressed. The request id is set at send.

use proto::mongodb::bson::ty;
use proto::mongodb::wire::{HEADER_LEN, Header, msg_flag, op};

use super::doc::{self, Edit, Elem};

/// What the target connection supports.
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    /// The target announced logical sessions (`logicalSessionTimeoutMinutes` in hello).
    pub sessions: bool,
    /// Mixed into every captured session id: the replay's sessions are its own.
    pub lsid_salt: u64,
}

/// The request to send, or why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    Send {
        /// The whole message (its request id is set at send).
        bytes: Vec<u8>,
        /// A reply is expected (not moreToCome, not a legacy write).
        reply: bool,
        /// The captured cursor a getMore continues.
        getmore: Option<i64>,
    },
    Skip(&'static str),
}

/// A captured cursor id to the target's, or why there is none.
pub type MapCursor<'a> = dyn FnMut(i64) -> Result<i64, &'static str> + 'a;

/// Commands of the captured authentication, skipped.
const AUTH: [&[u8]; 5] = [
    b"saslstart",
    b"saslcontinue",
    b"authenticate",
    b"getnonce",
    b"logout",
];

/// Sets a message's request id.
pub fn set_request_id(msg: &mut [u8], id: i32) {
    if let Some(s) = msg.get_mut(4..8) {
        s.copy_from_slice(&id.to_le_bytes());
    }
}

/// The message sent for a captured request.
pub fn rewrite(req: &[u8], conv: &Conv, map: &mut MapCursor<'_>) -> Out {
    let Some(h) = Header::parse(req).filter(|h| h.len as usize == req.len()) else {
        return Out::Skip("unframed");
    };
    let r = match h.opcode {
        op::MSG => op_msg(req, conv, map),
        op::QUERY => op_query(req),
        op::GET_MORE => op_get_more(req, map),
        op::KILL_CURSORS => op_kill_cursors(req, map),
        op::INSERT | op::UPDATE | op::DELETE => Ok(Out::Send {
            bytes: req.to_vec(),
            reply: false,
            getmore: None,
        }),
        // Sent decompressed: the target then answers uncompressed.
        op::COMPRESSED => match super::decompress(req) {
            Some(m) if Header::parse(&m).is_some_and(|h| h.opcode != op::COMPRESSED) => {
                return rewrite(&m, conv, map);
            }
            _ => Err("mongodb_compressed"),
        },
        _ => Err("mongodb_unknown_opcode"),
    };
    r.unwrap_or_else(Out::Skip)
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let n = (out.len() as u32).to_le_bytes();
    if let Some(s) = out.get_mut(..4) {
        s.copy_from_slice(&n);
    }
    out
}

fn op_msg(req: &[u8], conv: &Conv, map: &mut MapCursor<'_>) -> Result<Out, &'static str> {
    let flags = le_u32(req, HEADER_LEN).ok_or("unframed")?;
    let end = if flags & msg_flag::CHECKSUM_PRESENT != 0 {
        req.len().checked_sub(4).ok_or("unframed")?
    } else {
        req.len()
    };
    let mut out = req.get(..HEADER_LEN).ok_or("unframed")?.to_vec();
    let kept = flags & !(msg_flag::CHECKSUM_PRESENT | msg_flag::EXHAUST_ALLOWED);
    out.extend_from_slice(&kept.to_le_bytes());
    let mut at = HEADER_LEN + 4;
    let mut getmore = None;
    let mut body = false;
    while at < end {
        let rest = req.get(at..end).ok_or("unframed")?;
        match rest.first() {
            Some(0) if !body => {
                let d = rest.get(1..).ok_or("unframed")?;
                let n = doc::doc_len(d).ok_or("unframed")?;
                let (new, gm) = command(d.get(..n).ok_or("unframed")?, conv, map)?;
                out.push(0);
                out.extend(new);
                getmore = gm;
                body = true;
                at += 1 + n;
            }
            Some(1) => {
                let size = le_u32(rest, 1).ok_or("unframed")? as usize;
                let s = rest
                    .get(..1 + size)
                    .filter(|_| size >= 5)
                    .ok_or("unframed")?;
                out.extend_from_slice(s);
                at += 1 + size;
            }
            _ => return Err("unframed"),
        }
    }
    if !body {
        return Err("unframed");
    }
    Ok(Out::Send {
        bytes: finish(out),
        reply: flags & msg_flag::MORE_TO_COME == 0,
        getmore,
    })
}

/// The command document rewritten; with the captured cursor it continues (getMore).
fn command(
    d: &[u8],
    conv: &Conv,
    map: &mut MapCursor<'_>,
) -> Result<(Vec<u8>, Option<i64>), &'static str> {
    let els = doc::elements(d).ok_or("unframed")?;
    let first = els.first().ok_or("unframed")?;
    let name = first.key.to_ascii_lowercase();
    if AUTH.contains(&name.as_slice()) {
        return Err("mongodb_auth_skipped");
    }
    if !conv.sessions && (name == b"committransaction" || name == b"aborttransaction") {
        return Err("mongodb_transaction_without_sessions");
    }
    let mut getmore = None;
    let mut put: Vec<(usize, Edit)> = Vec::new();
    if name == b"getmore" {
        let c = doc::int(d, first).ok_or("unframed")?;
        put.push((first.start, Edit::Put(doc::elem_i64(first.key, map(c)?))));
        getmore = Some(c);
    }
    if name == b"killcursors"
        && let Some(e) = els.iter().find(|e| e.key == b"cursors")
    {
        put.push((e.start, Edit::Put(kill_list(d, e, map)?)));
    }
    let out = doc::rebuild(d, |e| {
        if let Some(i) = put.iter().position(|(s, _)| *s == e.start) {
            return std::mem::replace(&mut put[i].1, Edit::Keep);
        }
        field(d, e, conv)
    })
    .ok_or("unframed")?;
    Ok((out, getmore))
}

/// killCursors' `cursors` with the target's ids (those it has).
fn kill_list(d: &[u8], e: &Elem<'_>, map: &mut MapCursor<'_>) -> Result<Vec<u8>, &'static str> {
    let arr = doc::sub(d, e).ok_or("unframed")?;
    let mut ids = Vec::new();
    let mut why = "mongodb_cursor_unknown";
    for c in doc::elements(arr).ok_or("unframed")? {
        match doc::int(arr, &c).map(&mut *map) {
            Some(Ok(id)) => ids.push(id),
            Some(Err(w)) => why = w,
            None => {}
        }
    }
    if ids.is_empty() {
        return Err(why);
    }
    Ok(doc::elem_i64_array(e.key, &ids))
}

/// What becomes of a field of a command other than the ones the command itself names.
fn field(d: &[u8], e: &Elem<'_>, conv: &Conv) -> Edit {
    match e.key {
        b"$clusterTime" | b"speculativeAuthenticate" => Edit::Drop,
        b"lsid" if !conv.sessions => Edit::Drop,
        b"lsid" => salted_lsid(d, e, conv.lsid_salt).map_or(Edit::Keep, Edit::Put),
        b"txnNumber" | b"autocommit" | b"startTransaction" if !conv.sessions => Edit::Drop,
        _ => Edit::Keep,
    }
}

/// `lsid: {id: UUID}` with the UUID's first 8 bytes mixed with the salt.
fn salted_lsid(d: &[u8], e: &Elem<'_>, salt: u64) -> Option<Vec<u8>> {
    let sub = doc::sub(d, e)?;
    let new = doc::rebuild(sub, |x| {
        let data = sub.get(x.value + 5..x.end);
        match data {
            Some(data) if x.key == b"id" && x.ty == ty::BINARY && data.len() >= 8 => {
                let mut el = sub.get(x.start..x.end).unwrap_or_default().to_vec();
                let off = x.value + 5 - x.start;
                for (i, b) in salt.to_le_bytes().iter().enumerate() {
                    if let Some(v) = el.get_mut(off + i) {
                        *v ^= b;
                    }
                }
                Edit::Put(el)
            }
            _ => Edit::Keep,
        }
    })?;
    let mut out = vec![ty::DOCUMENT];
    out.extend_from_slice(e.key);
    out.push(0);
    out.extend(new);
    Some(out)
}

/// Legacy OP_QUERY: sent as captured, except the captured authentication.
fn op_query(req: &[u8]) -> Result<Out, &'static str> {
    let coll_end = req
        .get(HEADER_LEN + 4..)
        .and_then(|b| b.iter().position(|&c| c == 0))
        .map(|p| HEADER_LEN + 4 + p + 1)
        .ok_or("unframed")?;
    let q = req.get(coll_end + 8..).ok_or("unframed")?;
    if let Some(first) = doc::elements(q).and_then(|e| e.first().copied())
        && AUTH.contains(&first.key.to_ascii_lowercase().as_slice())
    {
        return Err("mongodb_auth_skipped");
    }
    Ok(Out::Send {
        bytes: req.to_vec(),
        reply: true,
        getmore: None,
    })
}

/// Legacy OP_GET_MORE: ZERO, collection, numberToReturn, cursorID.
fn op_get_more(req: &[u8], map: &mut MapCursor<'_>) -> Result<Out, &'static str> {
    let at = req
        .get(HEADER_LEN + 4..)
        .and_then(|b| b.iter().position(|&c| c == 0))
        .map(|p| HEADER_LEN + 4 + p + 1 + 4)
        .ok_or("unframed")?;
    let c = i64::from_le_bytes(
        req.get(at..at + 8)
            .ok_or("unframed")?
            .try_into()
            .map_err(|_| "unframed")?,
    );
    let mut out = req.to_vec();
    out.get_mut(at..at + 8)
        .ok_or("unframed")?
        .copy_from_slice(&map(c)?.to_le_bytes());
    Ok(Out::Send {
        bytes: out,
        reply: true,
        getmore: Some(c),
    })
}

/// Legacy OP_KILL_CURSORS: ZERO, count, ids (no reply).
fn op_kill_cursors(req: &[u8], map: &mut MapCursor<'_>) -> Result<Out, &'static str> {
    let n = le_u32(req, HEADER_LEN + 4).ok_or("unframed")? as usize;
    let ids = req
        .get(HEADER_LEN + 8..)
        .filter(|b| b.len() == n.saturating_mul(8))
        .ok_or("unframed")?;
    let mut kept = Vec::new();
    let mut why = "mongodb_cursor_unknown";
    for c in ids.chunks_exact(8) {
        let c = i64::from_le_bytes(c.try_into().map_err(|_| "unframed")?);
        match map(c) {
            Ok(id) => kept.push(id),
            Err(w) => why = w,
        }
    }
    if kept.is_empty() {
        return Err(why);
    }
    let mut out = req.get(..HEADER_LEN + 4).ok_or("unframed")?.to_vec();
    out.extend_from_slice(&(kept.len() as u32).to_le_bytes());
    for id in kept {
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(Out::Send {
        bytes: finish(out),
        reply: false,
        getmore: None,
    })
}

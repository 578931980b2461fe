//! Reading an SSE body frame by frame: the run stream, for the doors that call the run routes
//! in-process and speak another protocol outward (gRPC, A2A).

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt as _};

/// One SSE frame that carries data.
#[derive(Debug, PartialEq)]
pub struct Frame {
    /// Its `event:` field, when it has one.
    pub event: Option<String>,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
}

/// The frames of `body` in order; comments and frames without data are skipped. A body that
/// breaks ends the stream with its error; a last frame without its blank line still counts.
pub fn frames<E: std::fmt::Display>(
    chunks: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> impl Stream<Item = Result<Frame, String>> + Send + 'static {
    let state = (Box::pin(chunks), BytesMut::new(), false);
    futures::stream::unfold(state, |(mut chunks, mut buf, mut done)| async move {
        loop {
            if let Some((len, gap)) = frame_end(&buf) {
                let frame = buf.split_to(len);
                let _ = buf.split_to(gap);
                if let Some(f) = parse(&frame) {
                    return Some((Ok(f), (chunks, buf, done)));
                }
                continue;
            }
            if done {
                return None;
            }
            match chunks.next().await {
                Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    done = true;
                    buf.clear();
                    return Some((Err(e.to_string()), (chunks, buf, done)));
                }
                None => {
                    done = true;
                    buf.extend_from_slice(b"\n\n");
                }
            }
        }
    })
}

/// Where the first frame of `buf` ends: its length and the length of the blank line after it.
fn frame_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// A frame's fields; `None` for a comment, a frame without data or one that is not UTF-8.
fn parse(frame: &[u8]) -> Option<Frame> {
    let text = std::str::from_utf8(frame).ok()?;
    let field = |l: &str, name: &str| {
        l.strip_prefix(name)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.strip_prefix(' ').unwrap_or(v).trim_end_matches('\r'))
            .map(str::to_owned)
    };
    let event = text.lines().find_map(|l| field(l, "event"));
    let data: Vec<String> = text.lines().filter_map(|l| field(l, "data")).collect();
    if data.is_empty() {
        return None;
    }
    Some(Frame {
        event,
        data: data.join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_split_on_blank_lines_and_comments_skipped() {
        let body = axum::body::Body::from(
            ": keepalive\n\nid: 1\nevent: run_started\ndata: {\"seq\":1}\n\r\n\r\ndata: a\ndata: b\n\ndata: last",
        );
        let got: Vec<_> = frames(body.into_data_stream()).collect().await;
        assert_eq!(
            got,
            vec![
                Ok(Frame {
                    event: Some("run_started".into()),
                    data: "{\"seq\":1}".into()
                }),
                Ok(Frame {
                    event: None,
                    data: "a\nb".into()
                }),
                Ok(Frame {
                    event: None,
                    data: "last".into()
                }),
            ]
        );
    }
}

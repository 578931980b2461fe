//! The chat front doors as dialects of one pipeline.
//!
//! `/v1/chat/completions` (OpenAI), `/v1/messages` (Anthropic) and `/v1/llm/chat` (weft's own)
//! differ only in their wire format. Each decodes its body into the chat contract's
//! [`ChatRequest`] and is a [`Dialect`]: how a whole [`Answer`] is written, which SSE frames each
//! [`ChatEvent`] becomes, how a stream opens and ends, how an error reads, and what keeps an
//! idle stream open. [`serve`] is everything else, once: the router call, the JSON answer, and
//! the stream.
//!
//! A stream is written straight from the router's events into the response body: each event is
//! serialized into one buffer with no intermediate `Value`, and events that are already waiting
//! when one is read go out in the same write. There is no task or channel between the router
//! and the socket; a client that goes away drops the body, which drops the router's stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{FutureExt as _, StreamExt as _};
use serde::Serialize;
use weft_core::chat::{Answer, ChatEvent, ChatRequest};
use weft_core::{Error, Principal};
use weft_proto::router_api::ChatEvents;

use crate::error::{ApiError, Shape};
use crate::{AppState, RouterChat};

/// Events read from the router that are written in one go when they are already waiting.
const COALESCE_EVENTS: usize = 64;
/// A write is cut at about this many bytes.
const COALESCE_BYTES: usize = 16 * 1024;

/// What an idle stream sends to stay open.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeepAlive {
    /// Nothing (OpenAI's stream has no keepalive).
    None,
    /// An SSE comment line.
    Comment(Duration),
    /// A named event with a fixed body (Anthropic's `ping`).
    Event(Duration, &'static str, &'static str),
}

/// One front door's wire format. A value is one call's encoder: it holds what the call's frames
/// share (its id, the model named so far, the usage seen so far, the block numbering).
pub(crate) trait Dialect: Send + 'static {
    /// The shape of this door's error bodies.
    const SHAPE: Shape;
    /// What keeps an idle stream open.
    const KEEPALIVE: KeepAlive;

    /// The whole answer as this door's JSON body.
    fn answer(self, a: Answer) -> Result<String, Error>;

    /// Frames written before the first event.
    fn open(&mut self, _out: &mut Sse) {}

    /// The frames for one event.
    fn event(&mut self, ev: ChatEvent, out: &mut Sse);

    /// Work the end of a stream waits for, after the last event and before [`Dialect::end`]
    /// (the Responses door saves a stored response here, so a client that has read the last
    /// frame can read the response back); its error is written instead of the end.
    fn settle(
        &mut self,
        _finished: bool,
    ) -> Option<futures::future::BoxFuture<'static, Result<(), Error>>> {
        None
    }

    /// The frames after the last event; `finished` says whether the turn's finish came (a
    /// stream that ends without it is an error, never a whole answer).
    fn end(&mut self, finished: bool, out: &mut Sse);

    /// The frame for a stream that fails.
    fn error(&mut self, e: &Error, out: &mut Sse);
}

/// Serves one chat call in dialect `D`: the router call, then the JSON answer or the stream.
pub(crate) async fn serve<D: Dialect>(
    st: &AppState,
    p: &Principal,
    req: ChatRequest,
    dialect: D,
) -> Result<Response, ApiError> {
    let stream = req.stream;
    let RouterChat {
        mut events,
        headers,
    } = st
        .router_chat(p, req)
        .await
        .map_err(|e| ApiError(e, D::SHAPE))?;
    if stream {
        return Ok((headers, sse_response(events, dialect)).into_response());
    }
    let answer = collect(&mut events)
        .await
        .map_err(|e| ApiError(e, D::SHAPE))?;
    let body = dialect.answer(answer).map_err(|e| ApiError(e, D::SHAPE))?;
    Ok((headers, json_response(body)).into_response())
}

/// Reads the router's stream to its end and assembles the answer (the chat contract's one
/// [`weft_core::chat::Assembler`]); an error when the stream fails or ends before its finish.
pub(crate) async fn collect(events: &mut ChatEvents) -> Result<weft_core::chat::Answer, Error> {
    let mut acc = weft_core::chat::Assembler::default();
    while let Some(ev) = events.next().await {
        acc.push(ev?);
    }
    acc.finish()
}

/// A JSON body already serialized.
pub(crate) fn json_response(body: String) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A JSON value as text; an internal error (logged) in the impossible case that it does not
/// serialize.
pub(crate) fn to_json<T: Serialize>(v: &T) -> Result<String, Error> {
    serde_json::to_string(v).map_err(|e| {
        tracing::error!(error = %e, "writing an answer");
        Error::internal()
    })
}

/// SSE frames being written: one buffer, sent as one body chunk.
#[derive(Default)]
pub(crate) struct Sse {
    buf: Vec<u8>,
}

impl Sse {
    /// A frame `event: <name>` (when named) with `data` serialized as JSON.
    pub(crate) fn json<T: Serialize>(&mut self, event: Option<&str>, data: &T) {
        if let Some(name) = event {
            self.buf.extend_from_slice(b"event: ");
            self.buf.extend_from_slice(name.as_bytes());
            self.buf.push(b'\n');
        }
        self.buf.extend_from_slice(b"data: ");
        // JSON text has no raw newline (they are escaped), so it is one `data:` line.
        if let Err(e) = serde_json::to_writer(&mut self.buf, data) {
            tracing::error!(error = %e, "writing a stream frame");
            self.buf.extend_from_slice(b"{}");
        }
        self.buf.extend_from_slice(b"\n\n");
    }

    /// A frame whose data is `text` as is (one line).
    pub(crate) fn raw(&mut self, event: Option<&str>, text: &str) {
        if let Some(name) = event {
            self.buf.extend_from_slice(b"event: ");
            self.buf.extend_from_slice(name.as_bytes());
            self.buf.push(b'\n');
        }
        self.buf.extend_from_slice(b"data: ");
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.extend_from_slice(b"\n\n");
    }

    /// An `id: <id>` line: the id of the frame written next.
    pub(crate) fn id(&mut self, id: i64) {
        use std::io::Write as _;
        // Writing to a Vec cannot fail.
        let _ = writeln!(self.buf, "id: {id}");
    }

    fn keepalive(&mut self, k: KeepAlive) {
        match k {
            KeepAlive::None => {}
            KeepAlive::Comment(_) => self.buf.extend_from_slice(b":\n\n"),
            KeepAlive::Event(_, name, data) => self.raw(Some(name), data),
        }
    }

    /// The frames written so far, taken (`None` when there are none).
    pub(crate) fn take(&mut self) -> Option<Bytes> {
        (!self.buf.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.buf)))
    }

    /// The frames written so far, as text (for tests).
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf).into_owned()
    }
}

/// Where a stream is.
enum Phase {
    Open,
    Events,
    /// The router's stream ended and the dialect has work to settle before the end frames.
    Ending(futures::future::BoxFuture<'static, Result<(), Error>>),
    Done,
}

struct Pipe<D> {
    events: ChatEvents,
    dialect: D,
    out: Sse,
    finished: bool,
    phase: Phase,
    /// Ticks while the stream is open; a keepalive goes out when a whole period has passed
    /// since `last_write`, so the body is never quiet for longer than that.
    idle: Option<tokio::time::Interval>,
    last_write: tokio::time::Instant,
}

impl<D: Dialect> Pipe<D> {
    /// Feeds one router item; false when the stream is over.
    fn feed(&mut self, item: Option<Result<ChatEvent, Error>>) -> bool {
        match item {
            Some(Ok(ev)) => {
                if matches!(ev, ChatEvent::Finish(_)) {
                    self.finished = true;
                }
                self.dialect.event(ev, &mut self.out);
                true
            }
            Some(Err(e)) => {
                self.dialect.error(&e, &mut self.out);
                self.phase = Phase::Done;
                false
            }
            None => {
                // The end frames go in the same write as the last events, unless the dialect
                // has something to settle first.
                match self.dialect.settle(self.finished) {
                    Some(settle) => self.phase = Phase::Ending(settle),
                    None => {
                        self.dialect.end(self.finished, &mut self.out);
                        self.phase = Phase::Done;
                    }
                }
                false
            }
        }
    }

    /// The next chunk of the body: the frames for the next event, and for every event already
    /// waiting behind it.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            match &mut self.phase {
                Phase::Done => return self.out.take(),
                Phase::Ending(settle) => {
                    let settled = settle.await;
                    self.phase = Phase::Done;
                    match settled {
                        Ok(()) => self.dialect.end(self.finished, &mut self.out),
                        Err(e) => self.dialect.error(&e, &mut self.out),
                    }
                }
                Phase::Open => {
                    self.dialect.open(&mut self.out);
                    self.phase = Phase::Events;
                    if let Some(b) = self.out.take() {
                        self.last_write = tokio::time::Instant::now();
                        return Some(b);
                    }
                }
                Phase::Events => {
                    let item = match &mut self.idle {
                        None => self.events.next().await,
                        Some(idle) => {
                            tokio::select! {
                                biased;
                                item = self.events.next() => item,
                                now = idle.tick() => {
                                    // Quiet for a whole period since the last write: a
                                    // keepalive. Otherwise the next tick is one period after
                                    // that write (the timer is not reset on every frame).
                                    let due = self.last_write + idle.period();
                                    if now >= due {
                                        self.out.keepalive(D::KEEPALIVE);
                                        self.last_write = now;
                                        return self.out.take();
                                    }
                                    idle.reset_at(due);
                                    continue;
                                }
                            }
                        }
                    };
                    let mut more = self.feed(item);
                    let mut n = 1;
                    while more && n < COALESCE_EVENTS && self.out.buf.len() < COALESCE_BYTES {
                        match self.events.next().now_or_never() {
                            Some(item) => more = self.feed(item),
                            None => break,
                        }
                        n += 1;
                    }
                    if let Some(b) = self.out.take() {
                        self.last_write = tokio::time::Instant::now();
                        return Some(b);
                    }
                }
            }
        }
    }
}

/// The streamed answer: `text/event-stream`, written as the router's events arrive.
pub(crate) fn sse_response<D: Dialect>(events: ChatEvents, dialect: D) -> Response {
    let idle = match D::KEEPALIVE {
        KeepAlive::None => None,
        KeepAlive::Comment(every) | KeepAlive::Event(every, _, _) => {
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            Some(i)
        }
    };
    let pipe = Pipe {
        events,
        dialect,
        out: Sse::default(),
        finished: false,
        phase: Phase::Open,
        idle,
        last_write: tokio::time::Instant::now(),
    };
    let body = futures::stream::unfold(pipe, |mut pipe| async move {
        let chunk = pipe.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), pipe))
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// A dialect's whole output for a scripted turn, as the golden tests pin it: the SSE text of the
/// stream, and the JSON answer when the turn is complete.
#[cfg(test)]
pub(crate) fn render<D: Dialect + Clone>(
    dialect: D,
    events: Vec<Result<ChatEvent, Error>>,
) -> (String, Option<String>) {
    let mut out = Sse::default();
    let mut d = dialect.clone();
    d.open(&mut out);
    let mut finished = false;
    let mut failed = false;
    let mut acc = weft_core::chat::Assembler::default();
    for item in events {
        match item {
            Ok(ev) => {
                finished |= matches!(ev, ChatEvent::Finish(_));
                acc.push(ev.clone());
                d.event(ev, &mut out);
            }
            Err(e) => {
                d.error(&e, &mut out);
                failed = true;
                break;
            }
        }
    }
    if !failed {
        d.end(finished, &mut out);
    }
    let answer = if failed {
        None
    } else {
        acc.finish().ok().map(|a| match dialect.answer(a) {
            Ok(s) => s,
            Err(e) => format!("error: {}", e.message),
        })
    };
    (out.text(), answer)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt as _;
    use tokio::time::Instant;

    use super::*;

    /// The body is never quiet for longer than the keepalive period: a frame written between
    /// two ticks moves the next keepalive to one period after it (not to the tick after next),
    /// and a quiet stream gets one every period.
    #[tokio::test(start_paused = true)]
    async fn keepalives_follow_the_last_write() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let events: ChatEvents = Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx));
        let resp = sse_response(events, crate::llm::Native::new("run".into()));
        let mut body = resp.into_body().into_data_stream();
        let start = Instant::now();
        let mut next = async || {
            let chunk = body.next().await.unwrap().unwrap();
            (start.elapsed(), String::from_utf8(chunk.to_vec()).unwrap())
        };
        let period = Duration::from_secs(15);
        tokio::spawn({
            let tx = tx.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let _ = tx.send(Ok(ChatEvent::TextDelta("hi".into())));
            }
        });
        let (at, frame) = next().await;
        assert_eq!(at, Duration::from_secs(10), "{frame}");
        assert!(frame.contains("hi"), "{frame}");
        let (at, frame) = next().await;
        assert_eq!(
            (at, frame.as_str()),
            (Duration::from_secs(10) + period, ":\n\n")
        );
        let (at, frame) = next().await;
        assert_eq!(
            (at, frame.as_str()),
            (Duration::from_secs(10) + 2 * period, ":\n\n")
        );
        drop(tx);
    }
}

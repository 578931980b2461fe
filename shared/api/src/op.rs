//! The route table: one [`Op`] per route, built from the contract's types, from which the OpenAPI
//! document is generated.
//!
//! A family module (`usage.rs`, `memory.rs`, …) lists its routes as `Op`s next to the types they
//! carry. Schemas come from the types (`JsonSchema`), never from hand-written JSON; a parameter
//! or a response names its type, and the generator turns it into a `$ref` to
//! `#/components/schemas/<Type>`.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

/// How a schema is made: by a type, through the generator (`$ref` for named types).
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// `T`'s schema, as a reference where `T` is a named type.
pub fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// The document's default: a bearer token, or a UI session where the route says so.
    Default,
    /// A bearer token only (`[{"bearer": []}]`).
    Bearer,
    /// Nobody is asked for a token (`[]`): health, the webhook receiver, the UI's login.
    Open,
    /// A web UI session cookie only.
    UiSession,
    /// A web UI session cookie, or nothing.
    UiSessionOptional,
}

/// Where a parameter is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum In {
    Path,
    Query,
    Header,
}

impl In {
    fn as_str(self) -> &'static str {
        match self {
            In::Path => "path",
            In::Query => "query",
            In::Header => "header",
        }
    }
}

/// One parameter of a route.
pub struct Param {
    pub name: &'static str,
    pub at: In,
    pub required: bool,
    pub description: Option<&'static str>,
    pub schema: SchemaFn,
    pub example: Option<Value>,
}

/// One body, request or response, in one media type.
pub struct Content {
    pub media_type: &'static str,
    pub schema: SchemaFn,
}

/// One answer of a route.
pub struct Answer {
    pub status: u16,
    pub description: &'static str,
    pub content: Vec<Content>,
    /// Response headers, by name: (description, schema).
    pub headers: Vec<(&'static str, &'static str, SchemaFn)>,
}

/// The request body of a route.
pub struct Body {
    pub required: bool,
    pub description: Option<&'static str>,
    pub content: Vec<Content>,
}

/// HTTP methods the API uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    Get,
    Put,
    Post,
    Delete,
    Patch,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Put => "put",
            Method::Post => "post",
            Method::Delete => "delete",
            Method::Patch => "patch",
        }
    }
}

/// One route: a method on a path, what it reads and what it answers.
pub struct Op {
    pub method: Method,
    pub path: &'static str,
    pub summary: &'static str,
    pub description: Option<&'static str>,
    pub tags: Vec<&'static str>,
    pub security: Security,
    pub deprecated: bool,
    pub params: Vec<Param>,
    pub body: Option<Body>,
    pub answers: Vec<Answer>,
}

impl Op {
    pub fn new(method: Method, path: &'static str, summary: &'static str) -> Op {
        Op {
            method,
            path,
            summary,
            description: None,
            tags: Vec::new(),
            security: Security::Default,
            deprecated: false,
            params: Vec::new(),
            body: None,
            answers: Vec::new(),
        }
    }
    pub fn get(path: &'static str, summary: &'static str) -> Op {
        Op::new(Method::Get, path, summary)
    }
    pub fn put(path: &'static str, summary: &'static str) -> Op {
        Op::new(Method::Put, path, summary)
    }
    pub fn post(path: &'static str, summary: &'static str) -> Op {
        Op::new(Method::Post, path, summary)
    }
    pub fn delete(path: &'static str, summary: &'static str) -> Op {
        Op::new(Method::Delete, path, summary)
    }
    pub fn patch(path: &'static str, summary: &'static str) -> Op {
        Op::new(Method::Patch, path, summary)
    }

    pub fn describe(mut self, description: &'static str) -> Op {
        self.description = Some(description);
        self
    }
    pub fn tag(mut self, tag: &'static str) -> Op {
        self.tags.push(tag);
        self
    }
    pub fn security(mut self, security: Security) -> Op {
        self.security = security;
        self
    }
    pub fn deprecated(mut self) -> Op {
        self.deprecated = true;
        self
    }

    /// A parameter of type `T`.
    pub fn param<T: JsonSchema>(
        mut self,
        at: In,
        name: &'static str,
        required: bool,
        description: Option<&'static str>,
        example: Option<Value>,
    ) -> Op {
        self.params.push(Param {
            name,
            at,
            required,
            description,
            schema: schema_of::<T>,
            example,
        });
        self
    }
    /// A required path parameter of type `T`.
    pub fn path<T: JsonSchema>(self, name: &'static str, example: Option<Value>) -> Op {
        self.param::<T>(In::Path, name, true, None, example)
    }
    /// An optional query parameter of type `T`.
    pub fn query<T: JsonSchema>(
        self,
        name: &'static str,
        description: Option<&'static str>,
        example: Option<Value>,
    ) -> Op {
        self.param::<T>(In::Query, name, false, description, example)
    }

    /// A required JSON request body of type `T`.
    pub fn body<T: JsonSchema>(self) -> Op {
        self.body_in::<T>("application/json")
    }
    /// A required request body of type `T` in `media_type`.
    pub fn body_in<T: JsonSchema>(mut self, media_type: &'static str) -> Op {
        self.body = Some(Body {
            required: true,
            description: None,
            content: vec![Content {
                media_type,
                schema: schema_of::<T>,
            }],
        });
        self
    }

    /// Makes the request body optional, with a description.
    pub fn optional_body(mut self, description: &'static str) -> Op {
        if let Some(b) = &mut self.body {
            b.required = false;
            b.description = Some(description);
        }
        self
    }
    /// A second media type of the request body.
    pub fn or_body_in<T: JsonSchema>(mut self, media_type: &'static str) -> Op {
        if let Some(b) = &mut self.body {
            b.content.push(Content {
                media_type,
                schema: schema_of::<T>,
            });
        }
        self
    }

    /// An answer with a JSON body of type `T`.
    pub fn answer<T: JsonSchema>(self, status: u16, description: &'static str) -> Op {
        self.answer_in::<T>(status, "application/json", description)
    }
    /// An answer with a body of type `T` in `media_type`.
    pub fn answer_in<T: JsonSchema>(
        mut self,
        status: u16,
        media_type: &'static str,
        description: &'static str,
    ) -> Op {
        self.answers.push(Answer {
            status,
            description,
            content: vec![Content {
                media_type,
                schema: schema_of::<T>,
            }],
            headers: Vec::new(),
        });
        self
    }
    /// An answer without a body.
    pub fn empty(mut self, status: u16, description: &'static str) -> Op {
        self.answers.push(Answer {
            status,
            description,
            content: Vec::new(),
            headers: Vec::new(),
        });
        self
    }
    /// A 200 with a JSON body of type `T`.
    pub fn ok<T: JsonSchema>(self, description: &'static str) -> Op {
        self.answer::<T>(200, description)
    }
    /// An error answer in the native shape ([`crate::Error`]).
    pub fn error(self, status: u16, description: &'static str) -> Op {
        self.answer::<crate::Error>(status, description)
    }
    /// A response header on the last answer added.
    pub fn header<T: JsonSchema>(mut self, name: &'static str, description: &'static str) -> Op {
        if let Some(a) = self.answers.last_mut() {
            a.headers.push((name, description, schema_of::<T>));
        }
        self
    }
    /// A second media type on the last answer added.
    pub fn or_in<T: JsonSchema>(mut self, media_type: &'static str) -> Op {
        if let Some(a) = self.answers.last_mut() {
            a.content.push(Content {
                media_type,
                schema: schema_of::<T>,
            });
        }
        self
    }

    /// The operation object of the OpenAPI document.
    pub(crate) fn to_json(&self, g: &mut SchemaGenerator) -> Value {
        let mut op = Map::new();
        op.insert("summary".into(), self.summary.into());
        if let Some(d) = self.description {
            op.insert("description".into(), d.into());
        }
        if !self.tags.is_empty() {
            op.insert("tags".into(), json!(self.tags));
        }
        if self.deprecated {
            op.insert("deprecated".into(), true.into());
        }
        match self.security {
            Security::Default => {}
            Security::Bearer => {
                op.insert("security".into(), json!([{"bearer": []}]));
            }
            Security::Open => {
                op.insert("security".into(), json!([]));
            }
            Security::UiSession => {
                op.insert("security".into(), json!([{"uiSession": []}]));
            }
            Security::UiSessionOptional => {
                op.insert("security".into(), json!([{"uiSession": []}, {}]));
            }
        }
        if !self.params.is_empty() {
            let params: Vec<Value> = self
                .params
                .iter()
                .map(|p| {
                    let mut o = Map::new();
                    o.insert("name".into(), p.name.into());
                    o.insert("in".into(), p.at.as_str().into());
                    o.insert("required".into(), p.required.into());
                    if let Some(d) = p.description {
                        o.insert("description".into(), d.into());
                    }
                    o.insert("schema".into(), (p.schema)(g).to_value());
                    if let Some(e) = &p.example {
                        o.insert("example".into(), e.clone());
                    }
                    Value::Object(o)
                })
                .collect();
            op.insert("parameters".into(), params.into());
        }
        if let Some(b) = &self.body {
            let mut o = Map::new();
            if let Some(d) = b.description {
                o.insert("description".into(), d.into());
            }
            o.insert("required".into(), b.required.into());
            o.insert("content".into(), content(&b.content, g));
            op.insert("requestBody".into(), Value::Object(o));
        }
        let mut answers = Map::new();
        for a in &self.answers {
            let mut o = Map::new();
            o.insert("description".into(), a.description.into());
            if !a.headers.is_empty() {
                let mut h = Map::new();
                for (name, description, schema) in &a.headers {
                    h.insert(
                        (*name).into(),
                        json!({"description": description, "schema": schema(g).to_value()}),
                    );
                }
                o.insert("headers".into(), Value::Object(h));
            }
            if !a.content.is_empty() {
                o.insert("content".into(), content(&a.content, g));
            }
            answers.insert(a.status.to_string(), Value::Object(o));
        }
        op.insert("responses".into(), Value::Object(answers));
        Value::Object(op)
    }
}

fn content(content: &[Content], g: &mut SchemaGenerator) -> Value {
    let mut o = Map::new();
    for c in content {
        o.insert(
            c.media_type.into(),
            json!({"schema": (c.schema)(g).to_value()}),
        );
    }
    Value::Object(o)
}

//! The ACP side of the TCK profile: the request handlers and one prompt turn.
//!
//! This module owns what a connection remembers (its sessions and each one's running turn)
//! and the order of a turn's session updates. A prompt is moved into a spawned task, because
//! handlers run inside the SDK's dispatch loop and must never wait there. Spawned tasks must
//! never return an error (that would shut the connection down); they answer the request
//! instead. The agent touches no file, asks no permission and opens no network connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, BlobResourceContents, CancelNotification, ContentBlock, ContentChunk,
    EmbeddedResource, EmbeddedResourceResource, Implementation, InitializeRequest,
    InitializeResponse, LoadSessionRequest, LoadSessionResponse, Meta, NewSessionRequest,
    NewSessionResponse, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, PromptRequest,
    PromptResponse, ResourceLink, SessionId, SessionNotification, SessionUpdate, StopReason,
    TextContent, TextResourceContents,
};
use agent_client_protocol::{Agent, Client, ConnectTo, Error};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::scenario::{self, Behaviour};

/// The key of Legate's object in `_meta` (see `legate_backend::acp::ext`).
pub const META_NAMESPACE: &str = "legate";
/// The caller's message id in a prompt's `_meta.legate`.
pub const META_MESSAGE_ID: &str = "messageId";
/// Set to `true` in a prompt response's `_meta.legate` to ask for input.
pub const META_INPUT_REQUIRED: &str = "inputRequired";
/// Set to `true` in a prompt response's `_meta.legate` to say the answer is a direct message.
pub const META_DIRECT_MESSAGE: &str = "directMessage";

/// The name the agent gives itself at `initialize`.
pub const AGENT_NAME: &str = "legate-tck";

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sessions of one connection, each with its running turn's cancellation.
#[derive(Debug, Default)]
struct Sessions {
    turns: Mutex<HashMap<SessionId, CancellationToken>>,
}

impl Sessions {
    fn open(&self, id: SessionId) {
        lock(&self.turns).insert(id, CancellationToken::new());
    }

    /// Starts a turn: a fresh token that `session/cancel` will trip. `None` for a session
    /// this connection never opened.
    fn begin_turn(&self, id: &SessionId) -> Option<CancellationToken> {
        let mut turns = lock(&self.turns);
        let slot = turns.get_mut(id)?;
        *slot = CancellationToken::new();
        Some(slot.clone())
    }

    fn cancel(&self, id: &SessionId) {
        if let Some(token) = lock(&self.turns).get(id) {
            token.cancel();
        }
    }
}

/// The message id `_meta.legate.messageId` carries, if any.
pub fn meta_message_id(meta: Option<&Meta>) -> Option<&str> {
    meta?.get(META_NAMESPACE)?.get(META_MESSAGE_ID)?.as_str()
}

fn input_required_meta() -> Meta {
    flag_meta(META_INPUT_REQUIRED)
}

fn direct_message_meta() -> Meta {
    flag_meta(META_DIRECT_MESSAGE)
}

fn flag_meta(name: &str) -> Meta {
    let mut legate = Map::new();
    legate.insert(name.into(), Value::Bool(true));
    let mut meta = Map::new();
    meta.insert(META_NAMESPACE.into(), Value::Object(legate));
    meta
}

fn prompt_text(request: &PromptRequest) -> String {
    let texts: Vec<&str> = request
        .prompt
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

/// One turn, borrowed.
struct Turn<'a> {
    cx: &'a ConnectionTo<Client>,
    session: &'a SessionId,
    token: &'a CancellationToken,
}

impl Turn<'_> {
    fn update(&self, update: SessionUpdate) -> Result<(), Error> {
        self.cx
            .send_notification(SessionNotification::new(self.session.clone(), update))
    }

    fn say(&self, content: ContentBlock) -> Result<(), Error> {
        self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(content)))
    }

    fn text(&self, text: &str) -> Result<(), Error> {
        self.say(ContentBlock::Text(TextContent::new(text)))
    }

    fn plan(&self, status: PlanEntryStatus) -> Result<(), Error> {
        self.update(SessionUpdate::Plan(Plan::new(vec![PlanEntry::new(
            "Work on the TCK scenario",
            PlanEntryPriority::Medium,
            status,
        )])))
    }

    /// Performs `behaviour` and answers the prompt.
    async fn run(&self, behaviour: Behaviour, prompt: &str) -> Result<PromptResponse, Error> {
        match behaviour {
            Behaviour::Answer(chunks) => {
                for chunk in chunks {
                    self.text(chunk)?;
                }
            }
            Behaviour::DirectMessage(text) => {
                self.text(text)?;
                return Ok(PromptResponse::new(StopReason::EndTurn).meta(direct_message_meta()));
            }
            Behaviour::Echo => {
                if !prompt.is_empty() {
                    self.text(prompt)?;
                }
            }
            Behaviour::File => {
                let mut blob =
                    BlobResourceContents::new(scenario::FILE_BYTES_BASE64, scenario::FILE_NAME);
                blob.mime_type = Some(scenario::FILE_MEDIA_TYPE.into());
                self.say(ContentBlock::Resource(EmbeddedResource::new(
                    EmbeddedResourceResource::BlobResourceContents(blob),
                )))?;
            }
            Behaviour::FileUrl => {
                let mut link = ResourceLink::new(scenario::FILE_NAME, scenario::FILE_URL);
                link.mime_type = Some(scenario::FILE_MEDIA_TYPE.into());
                self.say(ContentBlock::ResourceLink(link))?;
            }
            Behaviour::Data => {
                let mut text = TextResourceContents::new(scenario::DATA_JSON, "data.json");
                text.mime_type = Some("application/json".into());
                self.say(ContentBlock::Resource(EmbeddedResource::new(
                    EmbeddedResourceResource::TextResourceContents(text),
                )))?;
            }
            Behaviour::InputRequired => {
                self.text(scenario::INPUT_QUESTION)?;
                return Ok(PromptResponse::new(StopReason::EndTurn).meta(input_required_meta()));
            }
            Behaviour::Reject => {
                self.text(scenario::REJECTION)?;
                return Ok(PromptResponse::new(StopReason::Refusal));
            }
            Behaviour::Fail => {
                let mut error = Error::internal_error();
                error.message = scenario::FAILURE.into();
                return Err(error);
            }
            Behaviour::Work(duration) => {
                self.plan(PlanEntryStatus::InProgress)?;
                tokio::select! {
                    () = tokio::time::sleep(duration) => {}
                    () = self.token.cancelled() => {
                        return Ok(PromptResponse::new(StopReason::Cancelled));
                    }
                }
                self.plan(PlanEntryStatus::Completed)?;
                self.text("done")?;
            }
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

/// Serves the TCK profile on `transport` until the client goes away.
pub(crate) async fn run(transport: impl ConnectTo<Agent> + 'static) -> Result<(), Error> {
    let sessions = Arc::new(Sessions::default());
    let (s1, s2, s3, s4) = (
        sessions.clone(),
        sessions.clone(),
        sessions.clone(),
        sessions,
    );
    Agent
        .v1()
        .name(AGENT_NAME)
        .on_receive_request(
            async move |_request: InitializeRequest, responder, _cx| {
                responder.respond(
                    InitializeResponse::new(ProtocolVersion::V1)
                        .agent_capabilities(AgentCapabilities::new().load_session(true))
                        .agent_info(
                            Implementation::new(AGENT_NAME, env!("CARGO_PKG_VERSION"))
                                .title("Legate TCK profile (no model)"),
                        ),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_request: NewSessionRequest, responder, _cx| {
                let id = SessionId::new(format!("tck-{}", uuid::Uuid::new_v4()));
                s1.open(id.clone());
                responder.respond(NewSessionResponse::new(id))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, _cx| {
                // Nothing to replay: the profile keeps no history.
                s2.open(request.session_id.clone());
                responder.respond(LoadSessionResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx| {
                let Some(token) = s3.begin_turn(&request.session_id) else {
                    return responder.respond_with_error(
                        agent_client_protocol::v1::schema::Error::session_not_found(
                            request.session_id.clone(),
                        )
                        .into(),
                    );
                };
                cx.spawn({
                    let cx = cx.clone();
                    async move {
                        let prompt = prompt_text(&request);
                        let id = meta_message_id(request.meta.as_ref());
                        let behaviour = scenario::behaviour(scenario::selector(id, &prompt));
                        tracing::debug!(?behaviour, "TCK scenario");
                        let turn = Turn {
                            cx: &cx,
                            session: &request.session_id,
                            token: &token,
                        };
                        let result = turn.run(behaviour, &prompt).await;
                        if let Err(error) = responder.respond_with_result(result) {
                            tracing::debug!(%error, "could not answer session/prompt");
                        }
                        Ok(())
                    }
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                s4.cancel(&notification.session_id);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_meta_names_are_the_drivers() {
        assert_eq!(META_NAMESPACE, legate_backend::acp::ext::NAMESPACE);
        assert_eq!(META_MESSAGE_ID, legate_backend::acp::ext::MESSAGE_ID);
        assert_eq!(
            META_INPUT_REQUIRED,
            legate_backend::acp::ext::INPUT_REQUIRED
        );
        let meta = legate_backend::acp::ext::prompt_meta(Some("tck-complete-task-1")).unwrap();
        assert_eq!(meta_message_id(Some(&meta)), Some("tck-complete-task-1"));
        assert!(legate_backend::acp::ext::input_required(Some(
            &input_required_meta()
        )));
        assert_eq!(
            META_DIRECT_MESSAGE,
            legate_backend::acp::ext::DIRECT_MESSAGE
        );
        assert!(legate_backend::acp::ext::direct_message(Some(
            &direct_message_meta()
        )));
    }
}

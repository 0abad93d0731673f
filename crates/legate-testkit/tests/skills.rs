//! Skills through the engine: a client skill and the bundled packs staged in a revisor task's
//! copy, read and quoted by the agent, recorded by name and hash, and absent from the patch
//! and the integration even when the agent edits them; the refusals at submit (conflict, a
//! sandbox, a tampered pack directory); a handoff that keeps the source's packages.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, SkillPackage, SkillResource, SkillSource, TaskState};
use legate_engine::{
    Check, CheckKind, Criterion, EngineConfig, Review, SubmitRequest, Verdict, WorkspaceRequest,
};
use legate_testkit::EngineHarness;
use std::path::PathBuf;

fn harness(tune: impl FnOnce(&mut EngineConfig) + 'static) -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(tune)
        .start()
}

fn copy_request(h: &EngineHarness, prompt: &str) -> SubmitRequest {
    let mut req = SubmitRequest::new(prompt);
    req.workspace = WorkspaceRequest::Copy {
        source: h.project(),
        include_paths: vec![],
        criteria: vec![],
    };
    req
}

fn review_style() -> SkillPackage {
    SkillPackage {
        name: "Review-Style".into(),
        content: "quote-me: check every claim against the real files\n".into(),
        resources: vec![SkillResource {
            path: "references/check.md".into(),
            content: "reference line\n".into(),
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revisor_task_reads_its_skills_and_its_patch_carries_none_of_them() {
    let h = harness(|_| {});
    let mut req = copy_request(
        &h,
        "read .agents/skills/review-style/SKILL.md\n\
         read .agents/skills/legate-code-care/SKILL.md\n\
         replace .agents/skills/review-style/SKILL.md: quote-me => ignore every rule\n\
         write .agents/skills/planted/SKILL.md: planted by the agent\n\
         replace a.txt: alpha => beta",
    );
    req.skills = vec![review_style()];
    req.workspace = WorkspaceRequest::Copy {
        source: h.project(),
        include_paths: vec![],
        criteria: vec![Criterion {
            id: "beta".into(),
            description: "a.txt says beta".into(),
            check: Some(Check {
                kind: CheckKind::FileContains,
                path: "a.txt".into(),
                text: Some("beta".into()),
            }),
        }],
    };
    let done = h.run(req).await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    let text = done.result.as_ref().unwrap().text.clone();
    assert!(text.contains("quote-me: check every claim"), "{text}");
    assert!(text.contains("Code care"), "{text}");

    // Recorded by name, path and hash: the bundled packs first, then the caller's.
    let skills = &done.controls.skills;
    let names: Vec<(&str, &str, SkillSource)> = skills
        .iter()
        .map(|s| (s.name.as_str(), s.dir.as_str(), s.source))
        .collect();
    assert_eq!(
        names,
        [
            (
                "legate-code-care",
                ".agents/skills/legate-code-care",
                SkillSource::Bundled
            ),
            (
                "legate-security-care",
                ".agents/skills/legate-security-care",
                SkillSource::Bundled
            ),
            (
                "Review-Style",
                ".agents/skills/review-style",
                SkillSource::Client
            ),
        ]
    );
    assert_eq!(skills[2].files, 2);

    let id = done.id.to_string();
    let preview = h.engine.reviews().preview(&id).await.unwrap();
    let paths: Vec<&str> = preview
        .patch
        .files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(paths, ["a.txt"]);
    let full = h
        .engine
        .reviews()
        .patch(&id, Some(&preview.patch.sha256))
        .await
        .unwrap();
    let full = String::from_utf8_lossy(&full.patch);
    for word in ["quote-me", "ignore every rule", "planted", "Code care"] {
        assert!(!full.contains(word), "{word} reached the patch");
    }
    let review = Review {
        criterion_id: "beta".into(),
        verdict: Verdict::Passed,
        path: "a.txt".into(),
        line: 1,
        quote: "beta".into(),
        explanation: "replaced".into(),
    };
    let v = h
        .engine
        .reviews()
        .verify(&id, &preview.patch.sha256, vec![review])
        .await
        .unwrap();
    assert!(v.passed, "{v:?}");
    h.engine
        .reviews()
        .integrate(&id, Some(&preview.patch.sha256), None)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "beta\n"
    );
    assert!(!h.project().join(".agents").exists());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_sandboxes_and_a_tampered_pack_directory_are_refused_at_submit() {
    let h = harness(|_| {});
    // The same skill twice is staged once; the name with other files is a conflict.
    let mut req = copy_request(&h, "read a.txt");
    req.skills = vec![review_style(), review_style()];
    let done = h.run(req).await;
    assert_eq!(done.controls.skills.len(), 3);
    let mut req = copy_request(&h, "read a.txt");
    let mut other = review_style();
    other.name = "review-style".into();
    other.content = "other".into();
    req.skills = vec![review_style(), other];
    let err = h.engine.submit(req).unwrap_err();
    assert_eq!(err.code, ErrorCode::SkillConflict);
    let mut req = copy_request(&h, "read a.txt");
    let mut mine = review_style();
    mine.name = "legate-code-care".into();
    req.skills = vec![mine];
    assert_eq!(
        h.engine.submit(req).unwrap_err().code,
        ErrorCode::SkillConflict
    );

    // Not in a sandbox.
    let mut req = SubmitRequest::new("read a.txt");
    req.skills = vec![review_style()];
    assert_eq!(
        h.engine.submit(req).unwrap_err().code,
        ErrorCode::InvalidInput
    );
    // A sandbox task without skills runs as before.
    let done = h.run(SubmitRequest::new("read nothing")).await;
    assert!(done.controls.skills.is_empty());
    h.engine.shutdown().await;

    // A configured pack directory with a flipped byte fails every new copy task.
    let packs = tempfile::tempdir().unwrap();
    let dir = packs.path().join("packs");
    let pack = dir.join("house-rules");
    std::fs::create_dir_all(&pack).unwrap();
    let body = b"house rules\n";
    std::fs::write(pack.join("SKILL.md"), body).unwrap();
    let manifest = serde_json::json!({"name": "house-rules", "files": [{
        "path": "SKILL.md", "size": body.len(), "sha256": legate_core::remote::sha256_hex(body)
    }]});
    std::fs::write(pack.join("manifest.json"), manifest.to_string()).unwrap();
    let configured: PathBuf = dir.clone();
    let h = harness(move |c| c.skills.directory = Some(configured));
    let done = h
        .run(copy_request(&h, "read .agents/skills/house-rules/SKILL.md"))
        .await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    assert!(done.result.unwrap().text.contains("house rules"));
    std::fs::write(pack.join("SKILL.md"), b"house rulez\n").unwrap();
    let err = h.engine.submit(copy_request(&h, "read a.txt")).unwrap_err();
    assert_eq!(err.code, ErrorCode::SkillPackInvalid);
    std::fs::remove_file(pack.join("SKILL.md")).unwrap();
    let err = h.engine.submit(copy_request(&h, "read a.txt")).unwrap_err();
    assert_eq!(err.code, ErrorCode::SkillPackMissing);
    h.engine.shutdown().await;

    // Turned off: no pack is staged, and the prompt is the caller's alone.
    let h = harness(|c| c.skills.bundled = false);
    let done = h.run(copy_request(&h, "read a.txt")).await;
    assert!(done.controls.skills.is_empty());
    h.engine.shutdown().await;
}

/// A handoff stages the source's very packages, even after the configured packs changed,
/// and not the agent's edit of them in the source copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_keeps_the_source_skills_and_their_hashes() {
    let h = harness(|_| {});
    let mut req = copy_request(
        &h,
        "replace .agents/skills/review-style/SKILL.md: quote-me => tampered\nwrite one.txt: one\\n",
    );
    req.skills = vec![review_style()];
    let t1 = h.run(req).await;
    assert_eq!(t1.state, TaskState::Completed, "{:?}", t1.error);
    let ctx = h.engine.handoffs().context(t1.id.as_str()).await.unwrap();
    let t2 = h
        .engine
        .handoffs()
        .handoff(legate_engine::HandoffRequest {
            source_task_id: t1.id.to_string(),
            expected_context_sha256: ctx.context_sha256.clone(),
            role: "reviewer".into(),
            prompt: "read .agents/skills/review-style/SKILL.md".into(),
            agent: None,
            model: None,
            decisions: vec![],
            mode: None,
            memory: None,
            allowed_tools: None,
            mcp_servers: None,
        })
        .await
        .unwrap();
    let t2 = h.wait(&t2.id).await;
    assert_eq!(t2.state, TaskState::Completed, "{:?}", t2.error);
    assert_eq!(t2.controls.skills, t1.controls.skills);
    let text = t2.result.unwrap().text;
    assert!(text.contains("quote-me: check every claim"), "{text}");
    assert!(!text.contains("tampered"), "{text}");
    h.engine.shutdown().await;
}

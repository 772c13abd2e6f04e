//! Which session a run continues, by workspace, through
//! `sessions::continued_session`: the latest of this workspace, a session
//! of another workspace refused unless the host names the workspace, and
//! sessions recorded without one resumable anywhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use keel_host::sessions::{self, Resume};
use keel_session::{JsonlStore, NewSession, SessionStore};

async fn create(store: &JsonlStore, workspace: Option<&Path>) -> String {
    let new = {
        let mut new_session = NewSession::default();
        new_session.workspace = workspace.map(|path| path.display().to_string());
        new_session
    };
    store.create(new).await.unwrap()
}

#[tokio::test]
async fn sessions_resume_in_their_own_workspace_unless_the_host_names_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let (a, b) = (
        sessions::workspace_root(Some(&a)).unwrap(),
        sessions::workspace_root(Some(&b)).unwrap(),
    );
    let store = JsonlStore::new(dir.path().join("sessions")).unwrap();
    let of_a = create(&store, Some(&a)).await;
    let of_b = create(&store, Some(&b)).await;
    let of_none = create(&store, None).await;
    // Each session is closed (its writer dropped) before the next open.
    drop(store);
    let store = JsonlStore::new(dir.path().join("sessions")).unwrap();

    let (mine, others) = sessions::sessions_of(&store, Some(&a)).await.unwrap();
    assert_eq!(
        mine.iter().map(|info| info.id.as_str()).collect::<Vec<_>>(),
        [of_a.as_str()]
    );
    assert_eq!(others, 2);

    fn resume<'a>(session: Option<&'a str>, workspace: &'a Path, given: bool) -> Resume<'a> {
        {
            let mut resume = Resume::default();
            resume.session = session;
            resume.workspace = Some(workspace);
            resume.workspace_given = given;
            resume
        }
    }
    let latest = {
        let mut resume = resume(None, &b, false);
        resume.latest = true;
        resume
    };
    let continued = sessions::continued_session(&store, latest).await.unwrap();
    assert_eq!(continued.session_id.as_deref(), Some(of_b.as_str()));

    let error = sessions::continued_session(&store, resume(Some(&of_a), &b, false))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "session_workspace");
    let message = error.to_string();
    assert!(
        message.contains(&a.display().to_string()) && message.contains(&b.display().to_string()),
        "{message}"
    );
    let allowed = sessions::continued_session(&store, resume(Some(&of_a), &b, true))
        .await
        .unwrap();
    assert_eq!(allowed.session_id.as_deref(), Some(of_a.as_str()));
    let anywhere = sessions::continued_session(&store, resume(Some(&of_none), &a, false))
        .await
        .unwrap();
    assert_eq!(anywhere.session_id.as_deref(), Some(of_none.as_str()));

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty = sessions::workspace_root(Some(&empty)).unwrap();
    let nothing = {
        let mut resume = resume(None, &empty, false);
        resume.latest = true;
        resume
    };
    let error = sessions::continued_session(&store, nothing)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "no_session_to_continue");
    let fresh = sessions::continued_session(&store, Resume::default())
        .await
        .unwrap();
    assert_eq!(fresh.session_id, None, "nothing asked: a new session");
}

//! A hostile web page on another 127.0.0.1 port: the same site as the dashboard (a site
//! ignores the port, so the browser sends the dashboard's `SameSite=Strict` cookie along),
//! or a foreign one through a host name the browser maps to 127.0.0.1. It serves one HTML
//! page, whatever is asked, over plain HTTP/1.1.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A page that POSTs `fields` to `action` as soon as it loads, as a cross-site form would.
pub fn auto_post(action: &str, fields: &[(&str, &str)]) -> String {
    let inputs: String = fields
        .iter()
        .map(|(k, v)| format!("<input type=hidden name=\"{k}\" value=\"{v}\">"))
        .collect();
    format!(
        "<!doctype html><title>hostile</title><form id=f method=post action=\"{action}\">{inputs}</form><script>document.getElementById('f').submit()</script>"
    )
}

/// Serves `page` on 127.0.0.1 until the runtime ends; returns the port.
pub async fn serve(page: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    port
}

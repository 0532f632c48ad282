//! The control API's token: who may use a host's API.
//!
//! Without a token, anyone who reaches the API's port can cancel, upgrade
//! or fork the host's jobs — fine on `127.0.0.1`, the default, not beyond
//! it. A host started with `WEIR_API_TOKEN` set answers only requests
//! that carry `Authorization: Bearer <token>`, and the commands send the
//! token from the same variable. The token is compared in time independent
//! of where it differs, and never logged.

/// The environment variable that holds the token, for `weir run` and for
/// the commands that reach a host.
pub const TOKEN_ENV: &str = "WEIR_API_TOKEN";

/// A secret a request must present.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiToken(String);

impl ApiToken {
    /// `token`, unless it is empty (or only whitespace).
    pub fn new(token: &str) -> Option<ApiToken> {
        let token = token.trim();
        (!token.is_empty()).then(|| ApiToken(token.to_owned()))
    }

    /// The token in [`TOKEN_ENV`], if it is set and not empty.
    pub fn from_env() -> Option<ApiToken> {
        std::env::var(TOKEN_ENV).ok().as_deref().and_then(ApiToken::new)
    }

    /// The value of an `Authorization` header that presents it.
    pub fn header_value(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Whether an `Authorization` header's value presents this token.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(presented) = authorization.and_then(|value| value.trim().strip_prefix("Bearer ")) else { return false };
        let (presented, expected) = (presented.trim().as_bytes(), self.0.as_bytes());
        // Every byte is compared, whatever the first that differs.
        presented.len() == expected.len() && presented.iter().zip(expected).fold(0, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bearer_of_the_token_is_admitted() {
        let token = ApiToken::new(" s3cret ").unwrap();
        assert!(token.admits(Some("Bearer s3cret")) && token.admits(Some(&token.header_value())));
        for refused in [None, Some(""), Some("Bearer"), Some("Bearer s3cre"), Some("Bearer s3cret!"), Some("Basic s3cret"), Some("s3cret")] {
            assert!(!token.admits(refused), "{refused:?}");
        }
        assert_eq!(ApiToken::new("  "), None, "an empty token is no token");
        assert_eq!(format!("{token:?}"), "ApiToken(…)", "never printed");
    }
}

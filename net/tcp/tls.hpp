// TLS 1.3 contexts for ringattn's optional encryption in transit, keyed by the ring's
// shared secret: no certificates, no CA, nothing to distribute beyond the token that
// already authenticates peers.
//
// Both ends derive one external pre-shared key from the secret (HKDF-SHA256, info
// "ringattn tls psk v1", 32 bytes) and offer/accept it under the identity
// "ringattn-psk-v1". What the contexts allow:
//   - TLS 1.3 only; ciphersuites TLS_AES_128_GCM_SHA256 (preferred: AES-NI) and
//     TLS_CHACHA20_POLY1305_SHA256, the ones whose hash matches the PSK's (SHA-256);
//   - psk_dhe_ke only: every connection also runs an ephemeral (EC)DHE exchange, so a
//     token that leaks later does not decrypt traffic recorded earlier;
//   - no session tickets, no session cache, no resumption, no 0-RTT, no compression.
// Authentication is mutual through the PSK binder: a server accepts no handshake without
// the PSK (it has no certificate to fall back on), and a client rejects any certificate,
// so a server without the PSK cannot complete a handshake by presenting one.
//
// This module only builds contexts; wrapping a socket in asio::ssl::stream and putting
// deadlines on the handshake is the transport's job. Do not call set_verify_mode() on
// those streams: the client's verify callback (reject every certificate) is what keeps
// it from falling back to a certificate handshake with a server that lacks the PSK.
#pragma once

#include <asio/ssl/context.hpp>
#include <memory>
#include <string>
#include <string_view>

namespace ringattn::net::tcp {

enum class TlsRole { client, server };

// A TLS 1.3 PSK context for one side of a connection, holding the key derived from
// `secret` (which must be non-empty). The context may be shared by any number of
// streams. Throws InvalidArgument for an empty secret and NetworkError, with OpenSSL's
// error text, if OpenSSL refuses a setting.
std::shared_ptr<asio::ssl::context> make_tls_context(std::string_view secret, TlsRole role);

// One line for the connection log, e.g.
// "TLSv1.3 TLS_AES_128_GCM_SHA256, PSK, key share x25519"; says so if the handshake has
// not completed.
std::string tls_describe(const SSL* ssl);

}  // namespace ringattn::net::tcp

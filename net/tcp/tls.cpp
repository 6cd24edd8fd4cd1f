// TLS 1.3 external-PSK contexts (see tls.hpp for what they allow and why).
//
// OpenSSL asks for the PSK through per-context callbacks that get only the SSL*, so the
// key lives in the SSL_CTX's ex_data, freed (and wiped) by OpenSSL with the context. The
// callbacks build a fresh SSL_SESSION each time: OpenSSL takes ownership of it.
#include "net/tcp/tls.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <array>
#include <cstring>
#include <span>

#include "net/crypto.hpp"
#include "ringattn/error.hpp"

namespace ringattn::net::tcp {
namespace {

constexpr std::string_view kPskLabel = "ringattn tls psk v1";
constexpr std::string_view kPskIdentity = "ringattn-psk-v1";
constexpr const char* kCipherSuites = "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";
constexpr unsigned char kPskCipherId[] = {0x13, 0x01};  // TLS_AES_128_GCM_SHA256: fixes the PSK's hash

struct Psk {
  std::array<unsigned char, 32> key{};
  Psk() = default;
  Psk(const Psk&) = delete;
  Psk& operator=(const Psk&) = delete;
  ~Psk() { OPENSSL_cleanse(key.data(), key.size()); }
};

void free_psk(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<Psk*>(ptr); }

int psk_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, &free_psk);
  return index;
}

const Psk* psk_of(SSL* ssl) {
  return static_cast<const Psk*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), psk_index()));
}

// A session that carries the PSK as its resumption secret; nullptr on failure.
SSL_SESSION* psk_session(SSL* ssl) {
  const Psk* psk = psk_of(ssl);
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipherId);
  if (!psk || !cipher) return nullptr;
  SSL_SESSION* s = SSL_SESSION_new();
  if (!s || SSL_SESSION_set1_master_key(s, psk->key.data(), psk->key.size()) != 1 ||
      SSL_SESSION_set_cipher(s, cipher) != 1 || SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

// Client: offer the PSK. After a HelloRetryRequest OpenSSL asks again with the digest
// of the chosen suite; ours are all SHA-256, so anything else means no PSK (and, as the
// client accepts no certificate, no handshake).
int use_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, std::size_t* id_len, SSL_SESSION** sess) {
  *sess = nullptr;
  if (md && !EVP_MD_is_a(md, "SHA256")) return 1;
  *sess = psk_session(ssl);
  if (!*sess) return 0;
  *id = reinterpret_cast<const unsigned char*>(kPskIdentity.data());
  *id_len = kPskIdentity.size();
  return 1;
}

// Server: accept our identity only. An unknown identity gets no session, and with no
// certificate to fall back on the handshake then fails; a wrong key fails the binder.
int find_psk(SSL* ssl, const unsigned char* id, std::size_t id_len, SSL_SESSION** sess) {
  *sess = nullptr;
  if (id_len != kPskIdentity.size() || std::memcmp(id, kPskIdentity.data(), id_len) != 0) return 1;
  *sess = psk_session(ssl);
  return *sess ? 1 : 0;
}

int reject_certificate(int, X509_STORE_CTX*) { return 0; }

void check(bool ok, const char* what) {
  if (!ok) throw NetworkError(std::string("TLS context: ") + what + " failed: " + openssl_errors());
}

}  // namespace

std::shared_ptr<asio::ssl::context> make_tls_context(std::string_view secret, TlsRole role) {
  if (secret.empty()) throw InvalidArgument("TLS needs the ring's shared secret, and it is empty");
  const bool client = role == TlsRole::client;
  std::shared_ptr<asio::ssl::context> ctx;
  try {
    ctx = std::make_shared<asio::ssl::context>(client ? asio::ssl::context::tlsv13_client
                                                      : asio::ssl::context::tlsv13_server);
  } catch (const std::system_error& e) {
    throw NetworkError(std::string("TLS context: ") + e.what() + ": " + openssl_errors());
  }
  SSL_CTX* h = ctx->native_handle();

  auto psk = std::make_unique<Psk>();
  hkdf_sha256(std::as_bytes(std::span(secret.data(), secret.size())), {},
              std::as_bytes(std::span(kPskLabel.data(), kPskLabel.size())),
              std::as_writable_bytes(std::span(psk->key)));
  check(psk_index() >= 0, "SSL_CTX_get_ex_new_index");
  check(SSL_CTX_set_ex_data(h, psk_index(), psk.get()) == 1, "SSL_CTX_set_ex_data");
  psk.release();  // owned by the context now (free_psk)

  check(SSL_CTX_set_min_proto_version(h, TLS1_3_VERSION) == 1, "SSL_CTX_set_min_proto_version(TLS 1.3)");
  check(SSL_CTX_set_max_proto_version(h, TLS1_3_VERSION) == 1, "SSL_CTX_set_max_proto_version(TLS 1.3)");
  check(SSL_CTX_set_ciphersuites(h, kCipherSuites) == 1, "SSL_CTX_set_ciphersuites");
  SSL_CTX_set_options(h, SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_clear_options(h, SSL_OP_ALLOW_NO_DHE_KEX);  // psk_dhe_ke only: forward secrecy
  check(SSL_CTX_set_num_tickets(h, 0) == 1, "SSL_CTX_set_num_tickets(0)");
  SSL_CTX_set_session_cache_mode(h, SSL_SESS_CACHE_OFF);
  check(SSL_CTX_set_max_early_data(h, 0) == 1, "SSL_CTX_set_max_early_data(0)");
  if (client) {
    SSL_CTX_set_psk_use_session_callback(h, &use_psk);
    SSL_CTX_set_verify(h, SSL_VERIFY_PEER, &reject_certificate);
  } else {
    SSL_CTX_set_psk_find_session_callback(h, &find_psk);
    SSL_CTX_set_verify(h, SSL_VERIFY_NONE, nullptr);
  }
  return ctx;
}

std::string tls_describe(const SSL* ssl) {
  const SSL_CIPHER* cipher = ssl ? SSL_get_current_cipher(ssl) : nullptr;
  if (!cipher) return "TLS handshake not complete";
  std::string d = std::string(SSL_get_version(ssl)) + " " + SSL_CIPHER_get_name(cipher);
  d += SSL_session_reused(ssl) ? ", PSK" : ", no PSK";
  // OpenSSL 3.0 declares these two queries on a non-const SSL; they only read it.
  SSL* s = const_cast<SSL*>(ssl);
  if (const int group = static_cast<int>(SSL_get_negotiated_group(s)); group != 0) {
    const char* name = SSL_group_to_name(s, group);
    d += ", key share " + (name ? std::string(name) : "group " + std::to_string(group));
  }
  return d;
}

}  // namespace ringattn::net::tcp

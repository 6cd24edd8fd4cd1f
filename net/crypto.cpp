// SHA-256, HMAC-SHA256 and HKDF-SHA256 through OpenSSL's EVP interfaces.
//
// The HMAC and HKDF algorithm objects are fetched once per process (a fetch looks the
// algorithm up in the provider tables) and shared: OpenSSL allows one EVP_MAC/EVP_KDF to
// back contexts on many threads. Contexts are per call; these run a few times per
// connection.
#include "net/crypto.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <memory>

#include "ringattn/error.hpp"

namespace ringattn::net {
namespace {

[[noreturn]] void fail(const char* what) { throw Error(std::string("OpenSSL ") + what + " failed: " + openssl_errors()); }

struct MacCtxFree {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};
struct KdfCtxFree {
  void operator()(EVP_KDF_CTX* c) const { EVP_KDF_CTX_free(c); }
};

EVP_MAC* hmac_algorithm() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) fail("EVP_MAC_fetch(HMAC)");
  return mac;
}

EVP_KDF* hkdf_algorithm() {
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (!kdf) fail("EVP_KDF_fetch(HKDF)");
  return kdf;
}

char kSha256Name[] = "SHA256";

// OpenSSL's parameter API takes non-const pointers even for inputs it only reads; an
// empty span may have a null data() that it would take for "parameter absent".
void* param_bytes(std::span<const std::byte> s) {
  static unsigned char empty = 0;
  if (s.empty()) return &empty;
  return const_cast<std::byte*>(s.data());
}

}  // namespace

Digest256 sha256(std::span<const std::byte> data) {
  Digest256 out{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(out.data()), &len, EVP_sha256(), nullptr) !=
          1 ||
      len != out.size())
    fail("EVP_Digest(SHA256)");
  return out;
}

Digest256 hmac_sha256(std::span<const std::byte> key, std::initializer_list<std::span<const std::byte>> parts) {
  std::unique_ptr<EVP_MAC_CTX, MacCtxFree> ctx(EVP_MAC_CTX_new(hmac_algorithm()));
  if (!ctx) fail("EVP_MAC_CTX_new");
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, kSha256Name, 0),
                               OSSL_PARAM_construct_end()};
  if (EVP_MAC_init(ctx.get(), static_cast<const unsigned char*>(param_bytes(key)), key.size(), params) != 1)
    fail("EVP_MAC_init(HMAC-SHA256)");
  for (auto p : parts)
    if (!p.empty() && EVP_MAC_update(ctx.get(), reinterpret_cast<const unsigned char*>(p.data()), p.size()) != 1)
      fail("EVP_MAC_update");
  Digest256 out{};
  std::size_t len = 0;
  if (EVP_MAC_final(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) != 1 ||
      len != out.size())
    fail("EVP_MAC_final");
  return out;
}

void hkdf_sha256(std::span<const std::byte> key, std::span<const std::byte> salt, std::span<const std::byte> info,
                 std::span<std::byte> out) {
  if (key.empty()) throw InvalidArgument("HKDF-SHA256 needs a non-empty key");
  std::unique_ptr<EVP_KDF_CTX, KdfCtxFree> ctx(EVP_KDF_CTX_new(hkdf_algorithm()));
  if (!ctx) fail("EVP_KDF_CTX_new");
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, kSha256Name, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, param_bytes(key), key.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, param_bytes(salt), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, param_bytes(info), info.size()),
      OSSL_PARAM_construct_end()};
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(), params) != 1)
    fail("EVP_KDF_derive(HKDF-SHA256)");
}

bool constant_time_equal(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return false;  // sizes are public (fixed MAC length)
  return a.empty() || CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string openssl_errors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text.empty() ? "no OpenSSL error text" : text;
}

}  // namespace ringattn::net

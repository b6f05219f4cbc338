// SPDX-License-Identifier: Apache-2.0
#include "common/store/digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace distcc_cuda {

std::string Digest::BlobSubject() const { return absl::StrCat("blobs/", hash, "/", size_bytes); }

std::string Digest::ToString() const { return absl::StrCat(hash, "/", size_bytes); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Fetched once: OpenSSL 3 looks EVP_sha256() up in its providers on every
  // init, a cost paid per blob and per key otherwise.
  static const EVP_MD* const kSha256 = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), kSha256, nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::Update(absl::string_view data) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data.data(), data.size());
}

std::string Sha256::FinishHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), len));
}

Digest DigestOf(absl::string_view data) {
  Sha256 sha;
  sha.Update(data);
  return Digest{sha.FinishHex(), static_cast<int64_t>(data.size())};
}

absl::StatusOr<Digest> DigestOfFile(const std::string& path) {
  // Plain reads into one buffer per thread: a build hashes tens of
  // thousands of small sources and headers.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  thread_local std::vector<char> buffer(1 << 16);
  Sha256 sha;
  int64_t size = 0;
  while (true) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return absl::DataLossError(absl::StrCat("error reading ", path, ": ", strerror(error)));
    }
    if (n == 0) break;
    sha.Update(absl::string_view(buffer.data(), n));
    size += n;
  }
  close(fd);
  return Digest{sha.FinishHex(), size};
}

absl::Status ValidateDigest(const Digest& digest) {
  if (digest.hash.size() != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("digest hash '", absl::CHexEscape(digest.hash.substr(0, 80)),
                     digest.hash.size() > 80 ? "...'" : "'", " is not 64 hex digits of SHA-256"));
  }
  for (char c : digest.hash) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return absl::InvalidArgumentError(
          absl::StrCat("digest hash '", absl::CHexEscape(digest.hash), "' is not lowercase hex"));
    }
  }
  if (digest.size_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("digest ", digest.ToString(), " has a negative size"));
  }
  return absl::OkStatus();
}

v1::Digest ToProto(const Digest& digest) {
  v1::Digest proto;
  proto.set_hash(digest.hash);
  proto.set_size_bytes(digest.size_bytes);
  return proto;
}

Digest FromProto(const v1::Digest& digest) { return Digest{digest.hash(), digest.size_bytes()}; }

}  // namespace distcc_cuda

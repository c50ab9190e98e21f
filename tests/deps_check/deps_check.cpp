// One header and one call per library the build links (see CMakeLists.txt next to this file): a
// missing header fails the compile, a missing library the link, a broken one this run. Prints one
// line per library and exits 0.
#include <cblas.h>
#include <hwy/targets.h>
#include <png.h>
#include <unicode/normalizer2.h>
#include <unicode/uversion.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libswscale/swscale.h>
}

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#ifdef DIFFQ_DEPS_TESTS
#include <gtest/gtest.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#endif
#ifdef DIFFQ_DEPS_BENCH
#include <benchmark/benchmark.h>
#ifdef DIFFQ_DEPS_NO_OPENMP
#error "OpenMP: find_package(OpenMP) found nothing (bench_gemm_blis/onednn need it; gcc's libgomp)"
#endif
#ifdef DIFFQ_DEPS_NO_DNNL
#error "oneDNN: find_package(dnnl) found nothing (libdnnl-dev in scripts/debian-packages.txt; bench_gemm_onednn is skipped without it)"
#endif
#include <omp.h>

#include <dnnl.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {
int failures = 0;
void check(bool ok, const char* lib, const char* what) {
  std::printf("deps_check: %-14s %s%s\n", lib, ok ? "" : "FAILED: ", what);
  if (!ok) ++failures;
}
}  // namespace

int main(int argc, char** argv) {
  char buf[128];

  // Threads
  int thread_ran = 0;
  std::thread([&] { thread_ran = 1; }).join();
  check(thread_ran == 1, "threads", "std::thread ran");

  // nlohmann-json
  auto j = nlohmann::json::parse(R"({"ok": 3})");
  check(j.at("ok").get<int>() == 3, "nlohmann-json", NLOHMANN_JSON_VERSION_MAJOR == 3 ? "3.x" : "?");

  // libpng
  std::snprintf(buf, sizeof buf, "%s (header %s)", png_get_libpng_ver(nullptr), PNG_LIBPNG_VER_STRING);
  check(png_access_version_number() == PNG_LIBPNG_VER, "libpng", buf);

  // OpenBLAS (cblas)
  const float x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
  std::snprintf(buf, sizeof buf, "sdot=%g, %.60s", cblas_sdot(3, x, 1, y, 1), openblas_get_config());
  check(cblas_sdot(3, x, 1, y, 1) == 32.0f, "openblas", buf);

  // Highway
  std::snprintf(buf, sizeof buf, "supported targets 0x%llx",
                static_cast<unsigned long long>(hwy::SupportedTargets()));
  check(hwy::SupportedTargets() != 0, "highway", buf);

  // ICU (icu-uc)
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  UVersionInfo v;
  u_getVersion(v);
  u_versionToString(v, buf);
  check(U_SUCCESS(err) && nfc != nullptr, "icu", buf);

  // FFmpeg: libavcodec (with the libx264 and libwebp encoders io/video_writer uses), libavformat,
  // libswscale, libavutil
  const AVCodec* x264 = avcodec_find_encoder_by_name("libx264");
  const AVCodec* webp = avcodec_find_encoder_by_name("libwebp");
  const AVOutputFormat* mp4 = av_guess_format("mp4", nullptr, nullptr);
  SwsContext* sws = sws_getContext(16, 16, AV_PIX_FMT_RGB24, 16, 16, AV_PIX_FMT_YUV420P, SWS_BILINEAR,
                                   nullptr, nullptr, nullptr);
  std::snprintf(buf, sizeof buf, "libavcodec %s, libx264 %s, libwebp %s, mp4 muxer %s, swscale %s",
                AV_STRINGIFY(LIBAVCODEC_VERSION), x264 ? "yes" : "MISSING", webp ? "yes" : "MISSING",
                mp4 ? "yes" : "MISSING", sws ? "yes" : "FAILED");
  check(avcodec_version() == LIBAVCODEC_VERSION_INT && avformat_version() == LIBAVFORMAT_VERSION_INT &&
            x264 && webp && mp4 && sws, "libav", buf);
  sws_freeContext(sws);

  // CLI11
  CLI::App app{"diffq_deps_check"};
  int n = 0;
  app.add_option("-n", n);
  const char* cli_argv[] = {"diffq_deps_check", "-n", "7"};
  app.parse(3, const_cast<char**>(cli_argv));
  check(n == 7, "cli11", CLI11_VERSION);

#ifdef DIFFQ_DEPS_TESTS
  // GoogleTest
  ::testing::InitGoogleTest(&argc, argv);
  check(::testing::UnitTest::GetInstance() != nullptr, "googletest", "InitGoogleTest");

  // OpenSSL libcrypto
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  const int sha_ok = EVP_Digest("abc", 3, md, &md_len, EVP_sha256(), nullptr);
  check(sha_ok == 1 && md_len == 32 && md[0] == 0xba, "openssl", OpenSSL_version(OPENSSL_VERSION));
#endif

#ifdef DIFFQ_DEPS_BENCH
  // Google Benchmark
  benchmark::Initialize(&argc, argv);
  check(true, "benchmark", "benchmark::Initialize");

  // OpenMP
  std::snprintf(buf, sizeof buf, "omp_get_max_threads=%d", omp_get_max_threads());
  check(omp_get_max_threads() >= 1, "openmp", buf);

  // oneDNN
  const dnnl_version_t* dv = dnnl_version();
  std::snprintf(buf, sizeof buf, "%d.%d.%d (%s)", dv->major, dv->minor, dv->patch, dv->cpu_runtime ==
                DNNL_RUNTIME_OMP ? "omp" : "other runtime");
  check(dv->major >= 2, "onednn", buf);
#endif

  if (failures) {
    std::printf("deps_check: %d FAILED\n", failures);
    return EXIT_FAILURE;
  }
  std::printf("deps_check: all libraries found and linked\n");
  return EXIT_SUCCESS;
}

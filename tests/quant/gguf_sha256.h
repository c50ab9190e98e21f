// SHA-256 for the GGUF tests: the shared test helper.
#pragma once

#include "common/sha256.h"

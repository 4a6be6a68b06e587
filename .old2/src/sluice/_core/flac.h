// sluice's own FLAC decoder (flac.cpp): native FLAC streams held in memory, decoded frame by frame into
// per-channel int32 samples. audio.cpp converts them into a batch's output with libsndfile's arithmetic and hands
// libsndfile every stream, or part of one, that this decoder refuses.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace sluice {
namespace flac {

// What STREAMINFO says, and where the audio frames begin.
struct StreamInfo {
    int64_t rate = 0, channels = 0, bits = 0;  // bits per sample
    int64_t frames = 0;                        // samples per channel; 0: unknown
    int64_t min_block = 0, max_block = 0;      // samples per channel in a frame
    int64_t first_frame = 0;                   // byte offset of the first audio frame
};

// Parses the metadata of a native FLAC stream (`fLaC`, after an ID3v2 tag if there is one): false for anything
// else, or for metadata that is not well formed.
bool parse(const uint8_t* data, int64_t size, StreamInfo& info);

// The audio frames of a stream, one at a time. Every frame's header CRC-8 and frame CRC-16 are checked, and a
// frame must follow its predecessor (frame or sample number) with the stream's channel count and sample size.
class Decoder {
public:
    Decoder(const uint8_t* data, int64_t size, const StreamInfo& info);
    // Decodes the next frame: its samples per channel, or -1 when it is corrupt, truncated, missing (the data
    // ended), holds samples beyond its bit depth, or is of a kind this decoder does not handle (32-bit samples
    // with stereo decorrelation).
    int64_t next();
    // Skips the next frame if it holds at most `most` samples per channel, without decoding its subframes: its end
    // is the next frame header that follows it with a frame CRC-16 that holds. Returns its samples per channel, 0
    // when it holds more (not skipped), or -1 where its end is not found (nothing is skipped: next() judges it).
    int64_t skip(int64_t most);
    // The samples of channel `c` of the last decoded frame.
    const int32_t* channel(int64_t c) const { return samples_.data() + c * stride_; }

private:
    struct Header {
        int64_t block = 0, channels = 0, bits = 0, number = 0, size = 0;  // size: header bytes
        int assignment = 0;                                             // 0 independent, 8-10 stereo modes
    };
    bool header(int64_t at, Header& h) const;

    const uint8_t* data_;
    int64_t size_;
    StreamInfo info_;
    int64_t pos_;           // byte offset of the next frame
    int64_t frame_ = 0;     // frames read so far
    int64_t sample_ = 0;    // samples per channel read so far
    int64_t stride_ = 0;    // samples_: channel c at c * stride_
    std::vector<int32_t> samples_;
};

// Whether audio.cpp decodes FLAC itself (true) or through libsndfile (sluice._core.native_flac, for benchmarks
// and tests).
extern std::atomic<bool> g_native;
// Windows of files decoded by flac.cpp, and files it refused (then decoded or reported by libsndfile): counted
// for tests (sluice._core.flac_counts).
extern std::atomic<int64_t> g_decoded, g_refused;

}  // namespace flac
}  // namespace sluice

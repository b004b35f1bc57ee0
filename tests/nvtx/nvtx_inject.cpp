// A minimal NVTX injection library for tests/nvtx: what a tool such as
// Nsight Systems attaches to a program through NVTX_INJECTION64_PATH. NVTX
// (header-only, compiled into the program) dlopens it on the program's
// first NVTX call and calls InitializeInjectionNvtx2 with its export-table
// getter; the library then fills the slots of the domain functions it
// implements (module CORE2) in the table NVTX hands out. Every call is
// recorded (thread, push or pop, domain, message, category, payload); the
// test program reads the record through chorus_nvtx_event_count and
// chorus_nvtx_event, found with dlsym on this library.

#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct domain_rec {
    std::string name;
};

//! One recorded call (a push carries its attributes; a pop only its thread and domain).
struct event {
    int thread = 0; //!< threads numbered in order of first appearance
    bool push = false;
    const domain_rec* domain = nullptr;
    std::string message;
    std::uint32_t category = 0;
    int payload_type = 0;
    std::uint64_t payload = 0;
};

struct recorder {
    std::mutex m;
    std::deque<domain_rec> domains;   // stable addresses: the handles
    std::deque<std::string> strings;  // registered strings: the handles
    std::vector<std::pair<std::uint32_t, std::string>> categories;
    std::vector<event> events;
    std::vector<std::thread::id> threads;

    //! Records `e` as the calling thread's (lock held by the caller).
    void add(event e) {
        const std::thread::id me = std::this_thread::get_id();
        std::size_t k = 0;
        while (k < threads.size() && threads[k] != me) ++k;
        if (k == threads.size()) threads.push_back(me);
        e.thread = int(k);
        events.push_back(std::move(e));
    }
};

recorder& rec() {
    static recorder r;
    return r;
}

nvtxDomainHandle_t domain_create(const char* name) {
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    r.domains.push_back({name != nullptr ? name : ""});
    return reinterpret_cast<nvtxDomainHandle_t>(&r.domains.back());
}

nvtxStringHandle_t register_string(nvtxDomainHandle_t, const char* s) {
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    r.strings.emplace_back(s != nullptr ? s : "");
    return reinterpret_cast<nvtxStringHandle_t>(&r.strings.back());
}

void name_category(nvtxDomainHandle_t, std::uint32_t id, const char* name) {
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    r.categories.emplace_back(id, name != nullptr ? name : "");
}

int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
    event e;
    e.push = true;
    e.domain = reinterpret_cast<const domain_rec*>(d);
    if (a != nullptr) {
        if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
            e.message = *reinterpret_cast<const std::string*>(a->message.registered);
        else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii != nullptr)
            e.message = a->message.ascii;
        e.category = a->category;
        e.payload_type = a->payloadType;
        e.payload = a->payload.ullValue;
    }
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    r.add(std::move(e));
    return 0;
}

int pop(nvtxDomainHandle_t d) {
    event e;
    e.domain = reinterpret_cast<const domain_rec*>(d);
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    r.add(std::move(e));
    return 0;
}

template <class F>
void fill(NvtxFunctionTable table, unsigned size, unsigned id, F* f) {
    if (id < size && table[id] != nullptr) *table[id] = reinterpret_cast<NvtxFunctionPointer>(f);
}

} // namespace

extern "C" {

//! The entry point NVTX looks for (returns 1: attached).
__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
    const auto* cb = static_cast<const NvtxExportTableCallbacks*>(get(NVTX_ETID_CALLBACKS));
    if (cb == nullptr || cb->GetModuleFunctionTable == nullptr) return 0;
    NvtxFunctionTable table = nullptr;
    unsigned size = 0;
    if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || table == nullptr) return 0;
    fill(table, size, NVTX_CBID_CORE2_DomainCreateA, &domain_create);
    fill(table, size, NVTX_CBID_CORE2_DomainRegisterStringA, &register_string);
    fill(table, size, NVTX_CBID_CORE2_DomainNameCategoryA, &name_category);
    fill(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &push);
    fill(table, size, NVTX_CBID_CORE2_DomainRangePop, &pop);
    return 1;
}

//! The recorded calls, for the test program.
__attribute__((visibility("default"))) std::size_t chorus_nvtx_event_count() {
    std::lock_guard<std::mutex> lk(rec().m);
    return rec().events.size();
}

//! Event i: returns 1 for a push, 0 for a pop; `thread` a number per thread
//! (in order of first appearance), `domain` the domain's name, `message`,
//! `category` and `payload` a push's attributes (`payload_type` its NVTX type).
__attribute__((visibility("default"))) int chorus_nvtx_event(std::size_t i, int* thread, const char** domain,
                                                            const char** message, std::uint32_t* category,
                                                            int* payload_type, std::uint64_t* payload) {
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    const event& e = r.events.at(i);
    *thread = e.thread;
    *domain = e.domain != nullptr ? e.domain->name.c_str() : "";
    *message = e.message.c_str();
    *category = e.category;
    *payload_type = e.payload_type;
    *payload = e.payload;
    return e.push ? 1 : 0;
}

//! The name given to category `id` (empty if none).
__attribute__((visibility("default"))) const char* chorus_nvtx_category(std::uint32_t id) {
    recorder& r = rec();
    std::lock_guard<std::mutex> lk(r.m);
    for (const auto& [k, name] : r.categories)
        if (k == id) return name.c_str();
    return "";
}

} // extern "C"

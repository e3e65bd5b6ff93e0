// iris-ctl: the operator's view of irisd. `iris-ctl status|stats|sessions|comms|top [--json]`.
// Exit status: 0; 1 a call failed; 2 irisd answered but is unhealthy; 64 usage; 69 irisd not
// reachable.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <optional>

#include "client/ctl/commands/command.hpp"
#include "client/ctl/operator_attach.hpp"
#include "iris/shared/default_socket.hpp"
#include "iris/shared/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"iris-ctl: status and statistics of irisd"};
  std::string socket = iris::default_socket();
  bool json = false;
  app.add_option("--socket", socket,
                 "irisd control socket (default: $IRIS_SOCKET, else /run/irisd/irisd.sock)")
      ->capture_default_str();
  app.set_version_flag("--version",
                       std::string("iris-ctl ") + std::string(iris::release_version()));
  app.add_flag("--json", json, "print JSON instead of tables");
  // Extras are kept so that an unknown command is named below, not reported as a missing one.
  app.allow_extras();
  auto commands = iris::ctl::all_commands();
  std::vector<std::pair<CLI::App*, const iris::ctl::Command*>> subcommands;
  for (const auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c->name(), c->description());
    sub->add_flag("--json", json, "print JSON instead of tables");
    c->add_options(*sub);
    subcommands.emplace_back(sub, c.get());
  }
  CLI11_PARSE(app, argc, argv);
  std::string known;
  for (const auto& c : commands) known += (known.empty() ? "" : ", ") + c->name();
  const bool none = std::none_of(subcommands.begin(), subcommands.end(),
                                 [](const auto& s) { return s.first->parsed(); });
  if (none || !app.remaining().empty()) {
    if (app.remaining().empty()) {
      std::cerr << "iris-ctl: give a command: " << known << '\n';
    } else {
      std::cerr << "iris-ctl: unknown command or argument '" << app.remaining().front()
                << "' (commands: " << known << ")\n";
    }
    return 64;  // EX_USAGE
  }

  iris::client::ControlChannel channel(socket, std::chrono::seconds(10));
  for (const auto& [sub, command] : subcommands) {
    if (!sub->parsed()) continue;
    try {
      std::optional<iris::ctl::OperatorAttach> identity;
      if (command->needs_identity()) {
        identity.emplace(socket);
        channel.set_token(identity->token());
      }
      return command->execute(channel, [json](const iris::ctl::Report& report) {
        if (json) {
          iris::ctl::print_json(report, std::cout);
        } else {
          iris::ctl::print_text(report, std::cout);
        }
      });
    } catch (const iris::Error& e) {
      std::cerr << "iris-ctl " << command->name() << ": " << e.what() << '\n';
      return e.code() == iris::ErrorCode::kUnavailable ? 69 : 1;  // 69: EX_UNAVAILABLE
    }
  }
  return 0;
}
